package netaddr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/netaddr"
)

func TestListen(t *testing.T) {
	for in, want := range map[string]struct {
		listen   string
		loopback bool
	}{
		"8080":           {"127.0.0.1:8080", true},
		":8080":          {"127.0.0.1:8080", true},
		"localhost:1":    {"localhost:1", true},
		"[::1]:2":        {"[::1]:2", true},
		"0.0.0.0:3":      {"0.0.0.0:3", false},
		"example.org:80": {"example.org:80", false},
	} {
		listen, loopback, err := netaddr.Listen(in)
		if err != nil || listen != want.listen || loopback != want.loopback {
			t.Errorf("Listen(%q) = %q, %v, %v; want %q, %v", in, listen, loopback, err, want.listen, want.loopback)
		}
	}
	for _, bad := range []string{"", "nonsense", "1.2.3.4"} {
		if _, _, err := netaddr.Listen(bad); !errors.Is(err, netaddr.ErrAddress) {
			t.Errorf("Listen(%q): err %v, want ErrAddress", bad, err)
		}
	}
}

func TestHost(t *testing.T) {
	for in, want := range map[string]string{
		"LocalHost:80": "localhost", "[::1]:8": "::1", "example.org.": "example.org",
		"10.0.0.1": "10.0.0.1", "": "", "[::1]": "::1",
	} {
		if got := netaddr.Host(in); got != want {
			t.Errorf("Host(%q) = %q, want %q", in, got, want)
		}
	}
	for host, want := range map[string]bool{"localhost": true, "127.0.0.9": true, "::1": true, "10.0.0.1": false, "": false} {
		if got := netaddr.Loopback(host); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", host, got, want)
		}
	}
}

func ExampleListen() {
	listen, loopback, _ := netaddr.Listen("8080")
	fmt.Println(listen, loopback)
	fmt.Println(netaddr.Host("[::1]:8080"))
	// Output:
	// 127.0.0.1:8080 true
	// ::1
}
