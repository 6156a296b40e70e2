package lhstd

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzReadFrameAndParse feeds arbitrary bytes through the relay's input path:
// framing, then request parsing, then Reply. It must never panic, and every
// error must be one the relay knows how to answer.
func FuzzReadFrameAndParse(f *testing.F) {
	f.Add([]byte(vectorRequest))
	f.Add([]byte(vectorOK))
	f.Add([]byte(vectorE903))
	f.Add([]byte("00000064" + vectorRequest[8:72]))
	f.Add([]byte("99999999"))
	f.Add([]byte("0000012"))
	f.Add([]byte("00000127\xb0\xa1"))
	f.Fuzz(func(t *testing.T, in []byte) {
		tg, err := ReadFrame(bytes.NewReader(in))
		if err != nil {
			return
		}
		if len(tg) < MinTelegram || len(tg) > MaxTelegram {
			t.Fatalf("ReadFrame returned a %d-byte telegram", len(tg))
		}
		req, err := ParseRequest(tg)
		var me *MalformedError
		switch {
		case err == nil:
			if !IsGUID(req.GUID) || req.Transfer.Amount <= 0 {
				t.Fatalf("accepted an invalid request: %+v", req)
			}
		case errors.As(err, &me):
		default:
			t.Fatalf("unexpected error class: %v", err)
		}
		r := Reply(tg, "E900", nil)
		if len(r) != HeaderLen || r[40] != 'R' {
			t.Fatalf("bad reply %q", r)
		}
	})
}

// FuzzDecodeMemo checks that the strict CP949 decoder never panics and that
// whatever it accepts round-trips through the encoder.
func FuzzDecodeMemo(f *testing.F) {
	f.Add([]byte("rent november       "))
	f.Add([]byte("\xbf\xf9\xbc\xbc 11\xbf\xf9          "))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, memo []byte) {
		if len(memo) > 20 {
			memo = memo[:20]
		}
		s, err := DecodeMemo(memo)
		if err != nil {
			return
		}
		if _, err := EncodeMemo(s); err != nil {
			t.Fatalf("accepted memo %q does not encode back: %v", memo, err)
		}
	})
}
