package cli

import (
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"gotest.tools/v3/assert"
)

func TestSecondsAndWholeAcceptExactlyPlainNumbers(t *testing.T) {
	type flags struct {
		S Seconds `name:"s"`
		W Whole   `name:"w"`
	}
	for _, tc := range []struct {
		args  []string
		ok    bool
		wantS time.Duration
		wantW int
	}{
		{[]string{"--s", "300"}, true, 300 * time.Second, 0},
		{[]string{"--s=2.5"}, true, 2500 * time.Millisecond, 0},
		{[]string{"--s", "0"}, true, 0, 0},
		{[]string{"--w", "7"}, true, 0, 7},
		{[]string{"--s", "-1"}, false, 0, 0},
		{[]string{"--s=-1"}, false, 0, 0},
		{[]string{"--s", "NaN"}, false, 0, 0},
		{[]string{"--s", "Inf"}, false, 0, 0},
		{[]string{"--s", "1e3"}, false, 0, 0},
		{[]string{"--s", ".5"}, false, 0, 0},
		{[]string{"--s", "5."}, false, 0, 0},
		{[]string{"--s="}, false, 0, 0},
		{[]string{"--s", "0x10"}, false, 0, 0},
		{[]string{"--w", "1.5"}, false, 0, 0},
		{[]string{"--w", "+3"}, false, 0, 0},
		{[]string{"--w", "99999999999999999999"}, false, 0, 0},
	} {
		var f flags
		p, err := kong.New(&f)
		assert.NilError(t, err)
		_, err = p.Parse(tc.args)
		if !tc.ok {
			assert.Assert(t, err != nil, "%v accepted", tc.args)
			continue
		}
		assert.NilError(t, err, "%v", tc.args)
		assert.Equal(t, f.S.D(), tc.wantS)
		assert.Equal(t, int(f.W), tc.wantW)
	}
}

func TestAtLeastOneRefusesZeroNamingTheFlag(t *testing.T) {
	for _, c := range []struct {
		w    Whole
		want string
	}{
		{0, "--max-attempts must be at least 1"},
		{1, ""},
		{7, ""},
	} {
		err := c.w.AtLeastOne("--max-attempts")
		if c.want == "" {
			assert.NilError(t, err, "Whole(%d)", c.w)
			continue
		}
		assert.Error(t, err, c.want)
	}
}
