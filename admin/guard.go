package admin

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"

	"github.com/sluicehq/sluice/internal/netaddr"
)

// guard refuses a request from a foreign Host or Origin (403) and a change
// without the bearer token (401), before the API sees it.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r.Host) {
			writeError(w, http.StatusForbidden, "admin: foreign Host "+quote(r.Host)+": the API answers only to loopback names and its allowed hosts")
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
			writeError(w, http.StatusForbidden, "admin: foreign Origin "+quote(o)+": requests from web pages of other origins are refused")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-admin"`)
			msg := "admin: a change needs the bearer token (Authorization: Bearer TOKEN)"
			if len(s.opts.Token) == 0 {
				msg = "admin: changes are disabled: the server has no token"
			}
			writeError(w, http.StatusUnauthorized, msg)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authorized compares the bearer token in constant time.
func (s *Server) authorized(r *http.Request) bool {
	if len(s.opts.Token) == 0 {
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.Token)) == 1
}

// hostAllowed: the Host header names loopback (localhost, 127.0.0.0/8,
// ::1) or one of the allowed hosts, with any port.
func (s *Server) hostAllowed(hostport string) bool {
	host := netaddr.Host(hostport)
	if host == "" {
		return false
	}
	if netaddr.Loopback(host) {
		return true
	}
	s.mu.Lock()
	allowed := s.opts.AllowedHosts
	s.mu.Unlock()
	for _, a := range allowed {
		if strings.EqualFold(a, host) {
			return true
		}
	}
	return false
}

// sameOrigin: the Origin is the API's own, http or https on the host and
// port the request was sent to.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(u.Host, host)
}

func quote(s string) string {
	if len(s) > 100 {
		s = s[:100] + "..."
	}
	return `"` + strings.ToValidUTF8(s, "?") + `"`
}
