package certs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"dedup/internal/testbed/testpki"
)

// Every bad file is refused naming the file and the cause; a reload that
// fails keeps what was loaded.
func TestLoadRefusesBadFilesAndReloadKeepsTheOld(t *testing.T) {
	dir := t.TempDir()
	ca, err := testpki.NewCA(dir, "t")
	assert.NilError(t, err)
	good, err := ca.Issue(testpki.Loopback("good", "good"))
	assert.NilError(t, err)
	other, err := ca.Issue(testpki.Loopback("other", "other"))
	assert.NilError(t, err)
	expired, err := ca.Issue(testpki.Leaf{Name: "expired", CN: "expired", Expired: true})
	assert.NilError(t, err)
	junk := filepath.Join(dir, "junk.pem")
	assert.NilError(t, os.WriteFile(junk, []byte("not pem"), 0o600))
	for _, tc := range []struct {
		name  string
		files Files
		want  []string
	}{
		{"missing certificate", Files{Cert: dir + "/none.pem", Key: good.Key}, []string{"none.pem", "no such file"}},
		{"missing key", Files{Cert: good.Cert, Key: dir + "/none-key.pem"}, []string{"none-key.pem"}},
		{"certificate not PEM", Files{Cert: junk, Key: good.Key}, []string{junk, "not PEM"}},
		{"key of another certificate", Files{Cert: good.Cert, Key: other.Key}, []string{other.Key, good.Cert}},
		{"expired", Files{Cert: expired.Cert, Key: expired.Key}, []string{expired.Cert, "expired"}},
		{"CA not PEM", Files{CA: junk}, []string{junk}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.files)
			assert.Assert(t, err != nil)
			for _, w := range tc.want {
				assert.Assert(t, strings.Contains(err.Error(), w), "%q not in %v", w, err)
			}
		})
	}

	cert, key := filepath.Join(dir, "live.pem"), filepath.Join(dir, "live-key.pem")
	cp := func(src, dst string) {
		b, err := os.ReadFile(src)
		assert.NilError(t, err)
		assert.NilError(t, os.WriteFile(dst, b, 0o600))
	}
	cp(good.Cert, cert)
	cp(good.Key, key)
	s, err := Load(Files{Cert: cert, Key: key, CA: ca.File})
	assert.NilError(t, err)
	first := s.NotAfter()
	assert.Assert(t, s.RequiresClientCert())
	assert.NilError(t, os.WriteFile(cert, []byte("broken"), 0o600))
	assert.ErrorContains(t, s.Reload(), cert)
	assert.Equal(t, s.NotAfter(), first, "a failed reload replaced the certificate")
	cfg, err := s.ServerConfig()
	assert.NilError(t, err)
	c, err := cfg.GetConfigForClient(nil)
	assert.NilError(t, err)
	assert.Equal(t, len(c.Certificates), 1)
}
