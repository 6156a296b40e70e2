// Package testpki makes short-lived certificate authorities and
// certificates for tests and demos (never a certificate checked into the
// repository): ECDSA P-256 keys, written as PEM files into a directory the
// caller owns.
package testpki

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
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that issues certificates.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA certificate's PEM file.
	File string
	dir  string
}

// NewCA makes a CA named name, valid for a day, and writes its
// certificate to dir/name-ca.pem.
func NewCA(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name + " test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Cert: cert, key: key, dir: dir, File: filepath.Join(dir, name+"-ca.pem")}
	if err := os.WriteFile(ca.File, pemBlock("CERTIFICATE", der), 0o600); err != nil {
		return nil, err
	}
	return ca, nil
}

// Leaf describes a certificate to issue.
type Leaf struct {
	Name     string   // file names: dir/Name.pem and dir/Name-key.pem
	CN       string   // subject common name
	DNS      []string // DNS SANs
	IPs      []net.IP // IP SANs
	URIs     []string // URI SANs, e.g. urn:dedup:channel:MOB
	Expired  bool     // NotAfter an hour ago
	Lifetime time.Duration
}

// Issued is a certificate and its key, as files.
type Issued struct {
	Cert, Key string
}

// Issue signs leaf and writes its certificate and key (mode 0600).
func (ca *CA) Issue(leaf Leaf) (Issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Issued{}, err
	}
	now := time.Now()
	life := leaf.Lifetime
	if life == 0 {
		life = 12 * time.Hour
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: leaf.CN},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(life),
		DNSNames:     leaf.DNS,
		IPAddresses:  leaf.IPs,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if leaf.Expired {
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-2*time.Hour), now.Add(-time.Hour)
	}
	for _, u := range leaf.URIs {
		pu, err := url.Parse(u)
		if err != nil {
			return Issued{}, fmt.Errorf("URI SAN %q: %w", u, err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Issued{}, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Issued{}, err
	}
	out := Issued{Cert: filepath.Join(ca.dir, leaf.Name+".pem"), Key: filepath.Join(ca.dir, leaf.Name+"-key.pem")}
	if err := os.WriteFile(out.Cert, pemBlock("CERTIFICATE", der), 0o600); err != nil {
		return Issued{}, err
	}
	if err := os.WriteFile(out.Key, pemBlock("PRIVATE KEY", kder), 0o600); err != nil {
		return Issued{}, err
	}
	return out, nil
}

// Loopback is the SANs of a server reached on this machine.
func Loopback(name, cn string) Leaf {
	return Leaf{Name: name, CN: cn, DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}
