package cluster_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a certificate for 127.0.0.1 signed by ca, with ca's
// certificate as the trusted root (or trust's when given), and returns the
// file names.
func (ca *testCA) issue(t *testing.T, name string, trust *testCA) (caFile, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{name}, // the node's name: bound to its certificate
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if trust == nil {
		trust = ca
	}
	dir := t.TempDir()
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	for f, b := range map[string][]byte{
		caFile:   trust.pem,
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}

// TestTLS: with mutual TLS, nodes with certificates from the cluster's CA
// join and talk; a node whose certificate another CA signed, and a node
// without TLS, can neither join nor deliver a message.
func TestTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("child processes")
	}
	t.Parallel()
	good, other := newCA(t, "cluster CA"), newCA(t, "another CA")
	tlsNode := func(ca *testCA, name string, trust *testCA, peers ...string) childConfig {
		caf, cert, key := ca.issue(t, name, trust)
		return childConfig{Name: name, Cluster: "tls", Peers: peers, CA: caf, Cert: cert, Key: key, Replicas: -1}
	}
	a := startChild(t, tlsNode(good, "a", nil))
	b := startChild(t, tlsNode(good, "b", nil, a.Address))
	// mallory trusts the cluster's CA (so it would accept a's server) but
	// presents a certificate of another CA.
	mallory := startChild(t, tlsNode(other, "mallory", good, a.Address))
	eve := startChild(t, childConfig{Name: "eve", Cluster: "tls", Peers: []string{a.Address}, Replicas: -1})
	a.AwaitAll(10*time.Second, "EVENT joined b")

	const n = 10
	for _, c := range []*child{b, mallory, eve} {
		c.Send(fmt.Sprintf("send %s sink %s %d", a.Address, c.Cfg.Name, n))
		c.Expect(10*time.Second, "SENT")
	}
	// A request after the sends comes back only once the sends were dealt
	// with (one connection, in order).
	for _, c := range []*child{mallory, eve} {
		c.Send(fmt.Sprintf("request %s echo %s", a.Address, c.Cfg.Name))
		f := c.AwaitLine(15*time.Second, "an answer", func(f []string) bool { return f[0] == "REPLY" || f[0] == "ERROR" })
		if f[0] != "ERROR" {
			t.Errorf("%s's request reached a: %v", c.Cfg.Name, f)
		}
		t.Logf("%s: %s", c.Cfg.Name, strings.Join(f, " "))
	}
	b.Send(fmt.Sprintf("request %s echo b", a.Address))
	if f := b.Expect(10*time.Second, "REPLY"); strings.Join(f[1:], " ") != "echo b" {
		t.Errorf("b's request through TLS: %v", f)
	}
	a.Send(fmt.Sprintf("count %s sink", a.Address))
	if f := a.Expect(10*time.Second, "REPLY"); f[1] != fmt.Sprint(n) {
		t.Errorf("a's sink counted %s messages, want b's %d only", f[1], n)
	}
	for _, c := range []*child{a, b} {
		for _, line := range c.SeenLines() {
			if strings.Contains(line, "mallory") || strings.Contains(line, "eve") {
				t.Errorf("%s: %s", c.Cfg.Name, line)
			}
		}
	}
}
