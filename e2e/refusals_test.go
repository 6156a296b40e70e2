package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/icmd"
)

// A job whose --metrics-textfile cannot be written is refused before it
// changes anything: purge deletes no row, and the message names the flag
// and the directory, not a temporary file.
func TestPurgeWithAnUnwritableTextfileDeletesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.db")
	db := openDB(t, path)
	db.applySchema(t)
	db.insertOldDone(t, 10, telegram(t, newGUID()), nil)
	res := icmd.RunCmd(icmd.Command(bin("purge"), "--db", path, "--days", "7", "--metrics-textfile", "/no/such/dir/x.prom"))
	assert.Check(t, is.Equal(res.ExitCode, 1), res.Combined())
	assert.Check(t, is.Equal(strings.Count(strings.TrimSpace(res.Stderr()), "\n"), 0), "want one line: %s", res.Stderr())
	assert.Check(t, strings.Contains(res.Stderr(), "--metrics-textfile /no/such/dir/x.prom: directory /no/such/dir"), res.Stderr())
	assert.Check(t, is.Equal(countRows(t, db), 10), "purge deleted rows before refusing its textfile")
}

// A --db that is a directory is refused naming the flag before anything
// is read or changed; a --db with no file yet gets an empty ledger (the
// lab's scripts rely on it) and one warning line that says so.
func TestDBThatIsADirectoryIsRefusedAndAMissingOneIsNamed(t *testing.T) {
	dir := t.TempDir()
	for _, job := range [][]string{{"purge", "--days", "7"}, {"reprocess", "--core", "http://127.0.0.1:1"}, {"resolve", "--core", "http://127.0.0.1:1"}} {
		res := icmd.RunCmd(icmd.Command(bin(job[0]), append([]string{"--db", dir}, job[1:]...)...))
		assert.Check(t, is.Equal(res.ExitCode, 1), "%s: %s", job[0], res.Combined())
		assert.Check(t, is.Equal(strings.TrimSpace(res.Stderr()), job[0]+": error: --db "+dir+": is a directory, not a ledger file"), job[0])
		entries, err := os.ReadDir(dir)
		assert.NilError(t, err)
		assert.Check(t, is.Len(entries, 0), "%s wrote into the directory given as --db", job[0])

		typo := filepath.Join(dir, "relya.db")
		res = icmd.RunCmd(icmd.Command(bin(job[0]), append([]string{"--db", typo}, job[1:]...)...))
		assert.Check(t, is.Equal(res.ExitCode, 0), "%s: %s", job[0], res.Combined())
		assert.Check(t, strings.Contains(res.Stderr(), "no ledger at "+typo+": created an empty one"), res.Stderr())
		assert.NilError(t, os.Remove(typo))
		os.Remove(typo + "-wal")
		os.Remove(typo + "-shm")
	}
}

// Every binary's --help lists its exit statuses.
func TestHelpListsTheExitStatuses(t *testing.T) {
	for _, b := range []string{"relay", "resolve", "reprocess", "purge", "settle", "inspect", "console", "fixturecore", "channel"} {
		res := icmd.RunCmd(icmd.Command(bin(b), "--help"))
		assert.Check(t, is.Equal(res.ExitCode, 0), b)
		out := strings.Join(strings.Fields(res.Stdout()), " ")
		assert.Check(t, strings.Contains(out, "Exit status: 0 done; 1 runtime error"), "%s --help: %s", b, res.Stdout())
		assert.Check(t, !strings.Contains(out, "cli."), "%s --help shows a Go type: %s", b, res.Stdout())
	}
}
