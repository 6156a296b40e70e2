// Package lhstd implements the standard telegram (전문) that channels and the
// relay exchange over TCP: framing, the 64-byte header, the TRF00001 transfer
// body, and Reply. See docs/telegram.md; its test vectors are normative.
package lhstd

import (
	"errors"
	"fmt"
	"io"
)

// Frame and telegram limits.
const (
	LengthFieldLen = 8     // the ASCII decimal length prefix of a frame
	HeaderLen      = 64    // every telegram starts with a 64-byte header
	MinTelegram    = 64    // smallest telegram a frame may announce
	MaxTelegram    = 65536 // largest telegram a frame may announce
)

// ErrFrameLength reports a length field that is not 8 digits or announces a
// telegram outside MinTelegram..MaxTelegram. The peer cannot be
// resynchronised: the connection must be closed without a reply.
var ErrFrameLength = errors.New("invalid frame length")

// ReadFrame reads one frame from r and returns its telegram (without the
// length field). It returns io.EOF if r ends before the first byte of a frame,
// io.ErrUnexpectedEOF if it ends inside one, and an error wrapping
// ErrFrameLength if the length field is invalid, in which case none of the
// announced bytes are read.
func ReadFrame(r io.Reader) ([]byte, error) {
	var lf [LengthFieldLen]byte
	if _, err := io.ReadFull(r, lf[:]); err != nil {
		return nil, err
	}
	n, err := ParseLength(lf[:])
	if err != nil {
		return nil, err
	}
	t := make([]byte, n)
	if _, err := io.ReadFull(r, t); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return t, nil
}

// ParseLength parses an 8-byte length field and checks the announced
// telegram length against the frame limits.
func ParseLength(lf []byte) (int, error) {
	if len(lf) != LengthFieldLen {
		return 0, fmt.Errorf("%w: %d bytes, want %d", ErrFrameLength, len(lf), LengthFieldLen)
	}
	n := 0
	for _, c := range lf {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %q is not 8 digits", ErrFrameLength, lf)
		}
		n = n*10 + int(c-'0')
	}
	if n < MinTelegram || n > MaxTelegram {
		return 0, fmt.Errorf("%w: %d outside %d..%d", ErrFrameLength, n, MinTelegram, MaxTelegram)
	}
	return n, nil
}

// AppendFrame appends telegram t, preceded by its length field, to dst, so
// that a frame can be written in one write.
func AppendFrame(dst, t []byte) []byte {
	var lf [LengthFieldLen]byte
	n := len(t)
	for i := LengthFieldLen - 1; i >= 0; i-- {
		lf[i] = byte('0' + n%10)
		n /= 10
	}
	dst = append(dst, lf[:]...)
	return append(dst, t...)
}
