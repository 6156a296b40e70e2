package lhstd

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
)

// The telegram's test vectors (docs/telegram.md), as bytes on the wire.
const (
	vectorRequest = "0000012720261129MOB000000000000000000001TRF00001S    MOB20261129093000  1102003000400111020030004002000000000150000rent november       "
	vectorOK      = "0000010920261129MOB000000000000000000001TRF00001R0000MOB20261129093000  C00000000000004200000009985000020261129093001"
	vectorE903    = "0000006420261129MOB000000000000000000001TRF00001RE903MOB20261129093000  "
)

func TestVectorRequestParses(t *testing.T) {
	tg, err := ReadFrame(strings.NewReader(vectorRequest))
	assert.NilError(t, err)
	assert.Equal(t, len(tg), 127)
	req, err := ParseRequest(tg)
	assert.NilError(t, err)
	assert.Equal(t, req.GUID, "20261129MOB000000000000000000001")
	assert.Equal(t, req.TxCode, TxTransfer)
	assert.Equal(t, req.Channel, "MOB")
	assert.Equal(t, req.SentAt, "20261129093000")
	assert.DeepEqual(t, req.Transfer, Transfer{From: "11020030004001", To: "11020030004002", Amount: 150000, Memo: "rent november"})
}

func TestVectorRepliesByteForByte(t *testing.T) {
	tg, err := ReadFrame(strings.NewReader(vectorRequest))
	assert.NilError(t, err)
	body, err := TransferResponseBody("C000000000000042", 99850000, "20261129093001")
	assert.NilError(t, err)
	assert.Equal(t, string(AppendFrame(nil, Reply(tg, "0000", body))), vectorOK)
	assert.Equal(t, string(AppendFrame(nil, Reply(tg, "E903", nil))), vectorE903)
}

func TestNewTransferRequestBuildsTheVector(t *testing.T) {
	tg, err := NewTransferRequest("20261129MOB000000000000000000001", "MOB", "20261129093000",
		Transfer{From: "11020030004001", To: "11020030004002", Amount: 150000, Memo: "rent november"})
	assert.NilError(t, err)
	assert.Equal(t, string(AppendFrame(nil, tg)), vectorRequest)
}

func TestParseTransferResponseBodyRoundTrip(t *testing.T) {
	b, err := TransferResponseBody("C1", 5, "20261129093001")
	assert.NilError(t, err)
	got, err := ParseTransferResponseBody(b)
	assert.NilError(t, err)
	assert.DeepEqual(t, got, TransferReply{Ref: "C1", Balance: 5, ProcessedAt: "20261129093001"})
}

func TestTransferResponseBodyRejectsWhatDoesNotFit(t *testing.T) {
	for _, tc := range []struct {
		name string
		ref  string
		bal  int64
		at   string
	}{
		{"ref too long", "C0000000000000042", 1, "20261129093001"},
		{"ref empty", "", 1, "20261129093001"},
		{"ref not ascii", "참조", 1, "20261129093001"},
		{"negative balance", "C1", -1, "20261129093001"},
		{"balance over 15 digits", "C1", 1_000_000_000_000_000, "20261129093001"},
		{"processed_at short", "C1", 1, "2026112909300"},
		{"processed_at not digits", "C1", 1, "2026112909300x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := TransferResponseBody(tc.ref, tc.bal, tc.at)
			assert.Assert(t, err != nil)
		})
	}
}

func TestReadFrameErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want error
	}{
		{"empty stream is EOF", "", io.EOF},
		{"length not digits", "0000012x" + strings.Repeat("A", 127), ErrFrameLength},
		{"length below 64", "00000063" + strings.Repeat("A", 63), ErrFrameLength},
		{"length above 65536", "00065537", ErrFrameLength},
		{"length with sign", "+0000127", ErrFrameLength},
		{"length field cut", "000001", io.ErrUnexpectedEOF},
		{"telegram cut", "00000127" + strings.Repeat("A", 100), io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadFrame(strings.NewReader(tc.in))
			assert.Assert(t, errors.Is(err, tc.want), "got %v", err)
		})
	}
}

func TestReadFrameDoesNotReadAnnouncedBytesOfBadLength(t *testing.T) {
	r := strings.NewReader("00099999" + "NEXT")
	_, err := ReadFrame(r)
	assert.Assert(t, errors.Is(err, ErrFrameLength))
	assert.Equal(t, r.Len(), 4, "bytes after a bad length field were consumed")
}

func TestReadFrameMaxSize(t *testing.T) {
	tg, err := ReadFrame(strings.NewReader("00065536" + strings.Repeat("A", 65536)))
	assert.NilError(t, err)
	assert.Equal(t, len(tg), 65536)
}

func vectorTelegram(t *testing.T) []byte {
	t.Helper()
	return []byte(vectorRequest[8:])
}

func TestParseRequestMalformed(t *testing.T) {
	set := func(off int, s string) func([]byte) []byte {
		return func(b []byte) []byte { copy(b[off:], s); return b }
	}
	for _, tc := range []struct {
		name   string
		mutate func([]byte) []byte
	}{
		{"kind R", set(40, "R")},
		{"kind blank", set(40, " ")},
		{"guid with dash", set(5, "-")},
		{"guid with space", set(31, " ")},
		{"tx_code lower case", set(32, "trf00001")},
		{"tx_code not served", set(32, "TRF00002")},
		{"channel lower case", set(45, "mob")},
		{"sent_at not digits", set(48, "2026112909300X")},
		{"from not digits", set(64, "1102003000400A")},
		{"to not digits", set(78, " 102003000400A")},
		{"amount not digits", set(92, "00000000015000-")},
		{"amount zero", set(92, "000000000000000")},
		{"memo control byte", set(107, "\x01")},
		{"memo invalid cp949", set(107, "\xff\xff")},
		{"memo cut two-byte char", set(126, "\xb0")},
		{"body too short", func(b []byte) []byte { return b[:126] }},
		{"body too long", func(b []byte) []byte { return append(b, ' ') }},
		{"header only", func(b []byte) []byte { return b[:64] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := tc.mutate(bytes.Clone(vectorTelegram(t)))
			_, err := ParseRequest(tg)
			var me *MalformedError
			assert.Assert(t, errors.As(err, &me), "got %v", err)
		})
	}
}

func TestParseRequestIgnoresRspCodeAndFiller(t *testing.T) {
	tg := bytes.Clone(vectorTelegram(t))
	copy(tg[41:], "XXXX")
	copy(tg[62:], "ZZ")
	_, err := ParseRequest(tg)
	assert.NilError(t, err)
}

func TestParseRequestShortTelegramIsUnanswerable(t *testing.T) {
	_, err := ParseRequest([]byte("short"))
	assert.Assert(t, errors.Is(err, ErrShort))
}

func TestMemoCP949(t *testing.T) {
	enc, err := EncodeMemo("월세 11월")
	assert.NilError(t, err)
	assert.Equal(t, len(enc), 20)
	got, err := DecodeMemo(enc)
	assert.NilError(t, err)
	assert.Equal(t, got, "월세 11월")

	_, err = EncodeMemo("이것은 스무 바이트를 넘는 메모입니다")
	assert.ErrorContains(t, err, "at most 20")
}

func TestSameRequest(t *testing.T) {
	a := vectorTelegram(t)
	sentAtDiffers := bytes.Clone(a)
	copy(sentAtDiffers[48:], "20261129093500")
	rspDiffers := bytes.Clone(a)
	copy(rspDiffers[41:], "0000")
	channelDiffers := bytes.Clone(a)
	copy(channelDiffers[45:], "IBK")
	amountDiffers := bytes.Clone(a)
	copy(amountDiffers[92:], "000000000150001")
	txDiffers := bytes.Clone(a)
	copy(txDiffers[32:], "TRF00002")

	assert.Check(t, SameRequest(a, sentAtDiffers))
	assert.Check(t, SameRequest(a, rspDiffers))
	assert.Check(t, SameRequest(nil, a), "a NULL stored request compares as equal")
	assert.Check(t, !SameRequest(a, channelDiffers))
	assert.Check(t, !SameRequest(a, amountDiffers))
	assert.Check(t, !SameRequest(a, txDiffers))
}

func TestReplyKeepsRequestHeader(t *testing.T) {
	tg := bytes.Clone(vectorTelegram(t))
	copy(tg[62:], "XY")
	r := Reply(tg, "E901", nil)
	assert.Equal(t, len(r), 64)
	assert.Check(t, is.Equal(string(r[:40]), string(tg[:40])))
	assert.Check(t, is.Equal(string(r[40:45]), "RE901"))
	assert.Check(t, is.Equal(string(r[45:]), string(tg[45:64])))
}

func TestMaskAccount(t *testing.T) {
	assert.Equal(t, MaskAccount("11020030004001"), "**********4001")
}
