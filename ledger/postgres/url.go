package postgres

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Redact returns dsn as it may be shown to a person, in a log line, an
// error, a summary or a metric: the scheme, the user, the hosts and ports,
// the database and sslmode, and nothing else. The password and every
// other query parameter (passwords hide in password=, sslpassword=, and
// names nobody can foresee) are left out.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	var b strings.Builder
	b.WriteString(u.Scheme + "://")
	if u.User != nil {
		b.WriteString(url.PathEscape(u.User.Username()) + "@")
	}
	b.WriteString(u.Host + u.EscapedPath())
	if m := u.Query().Get("sslmode"); m != "" {
		b.WriteString("?sslmode=" + url.QueryEscape(m))
	}
	return b.String()
}

// secrets returns every password dsn carries: the user-info password and
// the value of every query parameter whose name contains "password".
func secrets(dsn string) []string {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil
	}
	var out []string
	if u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			out = append(out, pw, url.PathEscape(pw), url.QueryEscape(pw))
		}
	}
	for name, vals := range u.Query() {
		if strings.Contains(strings.ToLower(name), "password") {
			for _, v := range vals {
				if v != "" {
					out = append(out, v, url.QueryEscape(v))
				}
			}
		}
	}
	return out
}

// CarriesPassword reports whether dsn itself holds a password, which every
// local user can read in the process list.
func CarriesPassword(dsn string) bool { return len(secrets(dsn)) > 0 }

// scrub removes every password of dsn from msg, whatever the library put
// in it.
func scrub(msg, dsn string) string {
	for _, pw := range secrets(dsn) {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	}
	return msg
}

// scrubbed is an error whose text has every password of dsn removed, and
// which still unwraps to the error it hides (errors.Is keeps working).
type scrubbed struct {
	err error
	dsn string
}

func (e scrubbed) Error() string { return scrub(e.err.Error(), e.dsn) }
func (e scrubbed) Unwrap() error { return e.err }

// CheckURL reports what is wrong with dsn as a PostgreSQL URL without
// connecting. A host that is not loopback or a unix socket must be reached
// with sslmode verify-full or verify-ca, unless insecure: anything less
// (pgx's default "prefer" falls back to plain text) hands the password to
// whoever answers in the server's place.
func CheckURL(dsn string, insecure bool) error {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return errors.New(scrub(err.Error(), dsn))
	}
	if err := checkMultiHost(dsn, cfg); err != nil {
		return err
	}
	if insecure {
		return nil
	}
	mode := sslmode(dsn)
	if mode == "verify-full" || mode == "verify-ca" {
		return nil
	}
	hosts := []string{cfg.ConnConfig.Host}
	for _, fb := range cfg.ConnConfig.Fallbacks {
		hosts = append(hosts, fb.Host)
	}
	for _, h := range hosts {
		if !isLocal(h) {
			return fmt.Errorf("host %s is not loopback and sslmode is %q: add sslmode=verify-full (with sslrootcert=FILE for a private CA), or give --db-insecure to allow it", h, mode)
		}
	}
	return nil
}

// checkMultiHost refuses a URL with more than one host that does not ask
// for the writable primary (docs/ledger.md): without
// target_session_attrs=read-write (or primary) a binary may settle on a
// standby and answer E902 to every new GUID until it is restarted.
func checkMultiHost(dsn string, cfg *pgxpool.Config) error {
	hosts := map[string]bool{fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port): true}
	for _, fb := range cfg.ConnConfig.Fallbacks { // sslmode=prefer adds the same host twice
		hosts[fmt.Sprintf("%s:%d", fb.Host, fb.Port)] = true
	}
	if len(hosts) < 2 {
		return nil
	}
	attrs := os.Getenv("PGTARGETSESSIONATTRS")
	if u, err := url.Parse(dsn); err == nil && u.Query().Has("target_session_attrs") {
		attrs = u.Query().Get("target_session_attrs")
	}
	if attrs == "read-write" || attrs == "primary" {
		return nil
	}
	return fmt.Errorf("%d hosts and target_session_attrs is %q: add target_session_attrs=read-write, or a relay may settle on a standby and answer E902 to every new GUID", len(hosts), attrs)
}

// sslmode is the sslmode a connection to dsn uses: the URL's, else
// PGSSLMODE's, else libpq's and pgx's default, prefer.
func sslmode(dsn string) string {
	if u, err := url.Parse(dsn); err == nil {
		if m := u.Query().Get("sslmode"); m != "" {
			return m
		}
	}
	if m := os.Getenv("PGSSLMODE"); m != "" {
		return m
	}
	return "prefer"
}

// isLocal reports whether host is loopback or a unix socket directory.
func isLocal(host string) bool {
	if strings.HasPrefix(host, "/") || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkPassfile refuses a password file that group or others may read, as
// libpq would silently ignore it (and a secret in it is no secret): the
// URL's passfile=, else PGPASSFILE, else ~/.pgpass if it exists.
//
// A default ~/.pgpass that cannot be read (a binary run through sudo as
// another account, whose HOME is not its own) is only a warning: the
// password may come another way (the URL, PGPASSWORD), and pgx itself
// skips a file it cannot read. A passfile named by the URL or PGPASSFILE
// that cannot be read is an error: it was asked for.
func checkPassfile(dsn string, warn func(string, ...any)) error {
	path := ""
	if u, err := url.Parse(dsn); err == nil {
		path = u.Query().Get("passfile")
	}
	explicit := path != ""
	if path == "" {
		path = os.Getenv("PGPASSFILE")
		explicit = path != ""
	}
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil
		}
		path = filepath.Join(home, ".pgpass")
	}
	fi, err := os.Stat(path)
	if err != nil {
		if !explicit && errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !explicit {
			if warn != nil {
				warn("the default password file cannot be read; connecting without it", "passfile", path, "err", err)
			}
			return nil
		}
		return fmt.Errorf("passfile %s: %w", path, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("passfile %s has mode %04o: it must be 0600 or stricter (chmod 0600 %s)", path, fi.Mode().Perm(), path)
	}
	return nil
}
