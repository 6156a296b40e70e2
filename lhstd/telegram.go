package lhstd

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"golang.org/x/text/encoding/korean"
)

// Header field offsets (docs/telegram.md "Header").
const (
	offGUID    = 0
	offTxCode  = 32
	offKind    = 40
	offRspCode = 41
	offChannel = 45
	offSentAt  = 48
	offFiller  = 62
)

// Header kinds.
const (
	KindRequest  = 'S'
	KindResponse = 'R'
)

// TxTransfer is the transaction code of a transfer (이체), the only one the
// relay serves.
const TxTransfer = "TRF00001"

// Body lengths of TRF00001.
const (
	TransferRequestBodyLen  = 63
	TransferResponseBodyLen = 45
)

// ErrShort reports a telegram shorter than its header: it cannot be answered.
var ErrShort = errors.New("telegram shorter than its 64-byte header")

// Header is the parsed 64-byte header of a telegram. Fields are the raw
// bytes as strings, unvalidated.
type Header struct {
	GUID    string // 32 characters of [0-9A-Za-z]
	TxCode  string // [0-9A-Z]{8}
	Kind    byte   // 'S' request, 'R' response
	RspCode string // four spaces in a request
	Channel string // [0-9A-Z]{3}
	SentAt  string // YYYYMMDDhhmmss
	Filler  string // two spaces
}

// ParseHeader splits the first 64 bytes of t into header fields without
// validating them. It fails only if t is shorter than the header.
func ParseHeader(t []byte) (Header, error) {
	if len(t) < HeaderLen {
		return Header{}, fmt.Errorf("%w: %d bytes", ErrShort, len(t))
	}
	h := string(t[:HeaderLen]) // one allocation; the fields share it
	return Header{
		GUID:    h[offGUID:offTxCode],
		TxCode:  h[offTxCode:offKind],
		Kind:    h[offKind],
		RspCode: h[offRspCode:offChannel],
		Channel: h[offChannel:offSentAt],
		SentAt:  h[offSentAt:offFiller],
		Filler:  h[offFiller:HeaderLen],
	}, nil
}

// Transfer is a validated TRF00001 request body.
type Transfer struct {
	From   string // debit account, 14 digits
	To     string // credit account, 14 digits
	Amount int64  // won, greater than zero
	Memo   string // UTF-8, trailing spaces removed
}

// Request is a validated request telegram.
type Request struct {
	Header
	Transfer Transfer
	Raw      []byte // the telegram as received, without the length field
}

// MalformedError explains why a request is answered E900.
type MalformedError struct {
	Reason string
}

// Error describes why the request is malformed.
func (e *MalformedError) Error() string { return "malformed request: " + e.Reason }

func malformed(format string, args ...any) error {
	return &MalformedError{Reason: fmt.Sprintf(format, args...)}
}

// ParseRequest validates request telegram t (docs/telegram.md "Validation").
// It returns an error wrapping ErrShort if t cannot be answered at all, and a
// *MalformedError if it must be answered E900.
func ParseRequest(t []byte) (*Request, error) {
	h, err := ParseHeader(t)
	if err != nil {
		return nil, err
	}
	switch {
	case h.Kind != KindRequest:
		return nil, malformed("kind %q is not S", h.Kind)
	case !isAlnum(h.GUID):
		return nil, malformed("guid is not 32 characters of [0-9A-Za-z]")
	case !isUpperAlnum(h.TxCode):
		return nil, malformed("tx_code is not [0-9A-Z]")
	case !isUpperAlnum(h.Channel):
		return nil, malformed("channel is not [0-9A-Z]")
	case !isDigits(h.SentAt):
		return nil, malformed("sent_at is not 14 digits")
	case h.TxCode != TxTransfer:
		return nil, malformed("tx_code %s is not served", h.TxCode)
	}
	tr, err := parseTransferBody(t[HeaderLen:])
	if err != nil {
		return nil, err
	}
	return &Request{Header: h, Transfer: tr, Raw: t}, nil
}

func parseTransferBody(b []byte) (Transfer, error) {
	if len(b) != TransferRequestBodyLen {
		return Transfer{}, malformed("transfer body is %d bytes, want %d", len(b), TransferRequestBodyLen)
	}
	from, to, amt, memo := b[0:14], b[14:28], b[28:43], b[43:63]
	if !isDigits(string(from)) {
		return Transfer{}, malformed("from_acct is not 14 digits")
	}
	if !isDigits(string(to)) {
		return Transfer{}, malformed("to_acct is not 14 digits")
	}
	if !isDigits(string(amt)) {
		return Transfer{}, malformed("amount is not 15 digits")
	}
	amount, err := strconv.ParseInt(string(amt), 10, 64)
	if err != nil || amount == 0 {
		return Transfer{}, malformed("amount is zero")
	}
	m, err := DecodeMemo(memo)
	if err != nil {
		return Transfer{}, err
	}
	return Transfer{From: string(from), To: string(to), Amount: amount, Memo: m}, nil
}

// DecodeMemo decodes a CP949 memo field strictly and trims its trailing
// spaces. A byte below 0x20, a sequence the decoder cannot map, or a two-byte
// character cut at the field's end makes it malformed.
func DecodeMemo(memo []byte) (string, error) {
	memo = bytes.TrimRight(memo, " ")
	for _, c := range memo {
		if c < 0x20 {
			return "", malformed("memo holds a control byte 0x%02x", c)
		}
	}
	out, err := korean.EUCKR.NewDecoder().Bytes(memo)
	if err != nil {
		return "", malformed("memo is not valid CP949: %v", err)
	}
	if bytes.ContainsRune(out, utf8.RuneError) {
		return "", malformed("memo is not valid CP949")
	}
	return string(out), nil
}

// EncodeMemo encodes a UTF-8 memo as CP949, right-padded with spaces to the
// 20-byte field. It fails if the memo cannot be encoded or is too long.
func EncodeMemo(memo string) ([]byte, error) {
	enc, err := korean.EUCKR.NewEncoder().Bytes([]byte(memo))
	if err != nil {
		return nil, fmt.Errorf("memo %q cannot be encoded as CP949: %w", memo, err)
	}
	if len(enc) > 20 {
		return nil, fmt.Errorf("memo %q is %d bytes in CP949, at most 20 fit", memo, len(enc))
	}
	return append(enc, bytes.Repeat([]byte(" "), 20-len(enc))...), nil
}

// NewTransferRequest builds a TRF00001 request telegram. It does not validate
// its arguments beyond the memo's encoding: the channel simulator uses it to
// build malformed telegrams too.
func NewTransferRequest(guid, channel, sentAt string, tr Transfer) ([]byte, error) {
	memo, err := EncodeMemo(tr.Memo)
	if err != nil {
		return nil, err
	}
	t := make([]byte, 0, HeaderLen+TransferRequestBodyLen)
	t = fmt.Appendf(t, "%-32.32s%-8.8s%c    %-3.3s%-14.14s  ", guid, TxTransfer, KindRequest, channel, sentAt)
	t = fmt.Appendf(t, "%-14.14s%-14.14s%015d", tr.From, tr.To, tr.Amount)
	return append(t, memo...), nil
}

// Reply builds the reply to request telegram req: the request's header with
// kind set to R and rsp_code set to code, every other header byte unchanged,
// followed by body. req must be at least HeaderLen bytes long.
func Reply(req []byte, code string, body []byte) []byte {
	r := make([]byte, HeaderLen, HeaderLen+len(body))
	copy(r, req[:HeaderLen])
	r[offKind] = KindResponse
	rsp := r[offRspCode:offChannel]
	n := copy(rsp, code)
	for i := n; i < len(rsp); i++ {
		rsp[i] = ' '
	}
	return append(r, body...)
}

// TransferReply is a parsed 0000 transfer response body.
type TransferReply struct {
	Ref         string // the core's reference, at most 16 characters
	Balance     int64  // the debit account's balance after the transfer
	ProcessedAt string // YYYYMMDDhhmmss
}

// TransferResponseBody builds the 45-byte body of a 0000 transfer reply. It
// fails if a field does not fit its place.
func TransferResponseBody(ref string, balance int64, processedAt string) ([]byte, error) {
	if len(ref) == 0 || len(ref) > 16 || !isPrintableASCII(ref) {
		return nil, fmt.Errorf("core ref %q does not fit 16 printable ASCII bytes", ref)
	}
	if balance < 0 || balance > 999_999_999_999_999 {
		return nil, fmt.Errorf("balance %d does not fit 15 digits", balance)
	}
	if len(processedAt) != 14 || !isDigits(processedAt) {
		return nil, fmt.Errorf("processed_at %q is not 14 digits", processedAt)
	}
	b := make([]byte, 0, TransferResponseBodyLen)
	return fmt.Appendf(b, "%-16s%015d%s", ref, balance, processedAt), nil
}

// ParseTransferResponseBody parses the 45-byte body of a 0000 transfer reply.
func ParseTransferResponseBody(b []byte) (TransferReply, error) {
	if len(b) != TransferResponseBodyLen {
		return TransferReply{}, fmt.Errorf("transfer reply body is %d bytes, want %d", len(b), TransferResponseBodyLen)
	}
	bal, err := strconv.ParseInt(string(b[16:31]), 10, 64)
	if err != nil {
		return TransferReply{}, fmt.Errorf("balance %q: %w", b[16:31], err)
	}
	return TransferReply{
		Ref:         string(bytes.TrimRight(b[0:16], " ")),
		Balance:     bal,
		ProcessedAt: string(b[31:45]),
	}, nil
}

// ReplyCode returns the rsp_code of a reply telegram, or "" if t is shorter
// than its header.
func ReplyCode(t []byte) string {
	if len(t) < HeaderLen {
		return ""
	}
	return string(t[offRspCode:offChannel])
}

// SameRequest reports whether received is a retransmission of stored: the
// same tx_code, channel and body. sent_at may differ; rsp_code and filler are
// not compared. A nil stored request (a row written by another tool) compares
// as equal. Both must be at least HeaderLen bytes long, or nil.
func SameRequest(stored, received []byte) bool {
	if stored == nil {
		return true
	}
	if len(stored) < HeaderLen || len(received) < HeaderLen {
		return bytes.Equal(stored, received)
	}
	return bytes.Equal(stored[offTxCode:offKind], received[offTxCode:offKind]) &&
		bytes.Equal(stored[offChannel:offSentAt], received[offChannel:offSentAt]) &&
		bytes.Equal(stored[HeaderLen:], received[HeaderLen:])
}

// MaskAccount hides all but the last four digits of an account number, for
// logs.
func MaskAccount(acct string) string {
	if len(acct) <= 4 {
		return acct
	}
	return string(bytes.Repeat([]byte("*"), len(acct)-4)) + acct[len(acct)-4:]
}

func isAlnum(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return len(s) > 0
}

func isUpperAlnum(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return len(s) > 0
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return len(s) > 0
}

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// IsGUID reports whether s is a valid GUID: 32 characters of [0-9A-Za-z].
func IsGUID(s string) bool { return len(s) == 32 && isAlnum(s) }

// IsResponseCode reports whether s has the shape of a response code: four
// characters of [0-9A-Z] (0000, B201, E901, ...).
func IsResponseCode(s string) bool { return len(s) == 4 && isUpperAlnum(s) }
