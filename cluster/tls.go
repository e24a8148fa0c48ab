package cluster

import (
	"crypto/tls"
	"errors"

	"google.golang.org/grpc/credentials"
)

// transportCredentials derives the server's and the client's credentials
// from a node's TLS configuration: mutual TLS, clients verified against
// ClientCAs (default RootCAs), servers against RootCAs, TLS 1.3.
func transportCredentials(cfg *tls.Config) (server, client credentials.TransportCredentials, err error) {
	if cfg == nil {
		return nil, nil, nil
	}
	if len(cfg.Certificates) == 0 && cfg.GetCertificate == nil {
		return nil, nil, errors.New("TLS: no certificate for this node (tls.Config.Certificates)")
	}
	if cfg.RootCAs == nil && cfg.ClientCAs == nil {
		// Without them Go would trust the system's roots: any certificate
		// from a public CA would join the cluster.
		return nil, nil, errors.New("TLS: no certificate authority for peers (tls.Config.RootCAs)")
	}
	srv := cfg.Clone()
	if srv.ClientCAs == nil {
		srv.ClientCAs = srv.RootCAs
	}
	if srv.ClientAuth < tls.RequireAndVerifyClientCert {
		srv.ClientAuth = tls.RequireAndVerifyClientCert
	}
	srv.MinVersion = max(srv.MinVersion, tls.VersionTLS13)
	cli := cfg.Clone()
	if cli.RootCAs == nil {
		cli.RootCAs = cli.ClientCAs
	}
	cli.MinVersion = max(cli.MinVersion, tls.VersionTLS13)
	if cli.GetClientCertificate == nil && len(cli.Certificates) == 0 && cfg.GetCertificate != nil {
		get := cfg.GetCertificate
		cli.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return get(nil) }
	}
	return credentials.NewTLS(srv), credentials.NewTLS(cli), nil
}
