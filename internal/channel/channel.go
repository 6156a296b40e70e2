// Package channel simulates channels (mobile, internet banking, ATM): it
// builds transfer telegrams, sends them to a relay, retransmits them the way
// channels do, and drives load while measuring throughput, latency and
// whether the core ever applied a GUID twice.
package channel

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"time"

	"dedup/lhstd"
)

// NewGUID returns a fresh 32-character GUID: the date, the channel code and
// 21 random digits.
func NewGUID(channel string) string {
	n, err := rand.Int(rand.Reader, new(big.Int).Exp(big.NewInt(10), big.NewInt(21), nil))
	if err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return fmt.Sprintf("%s%-3.3s%021s", time.Now().Format("20060102"), channel, n.String())
}

// Now is the sent_at of a telegram sent now.
func Now() string { return time.Now().Format("20060102150405") }

// Conn is one channel connection to a relay. It sends one request at a
// time and waits for its reply, as the protocol requires.
type Conn struct {
	c       net.Conn
	br      *bufio.Reader
	timeout time.Duration
}

// Dial connects to the relay at addr.
func Dial(addr string, timeout time.Duration) (*Conn, error) { return DialTLS(addr, timeout, nil) }

// DialTLS connects to the relay at addr over TLS with cfg (nil: plain
// TCP), the handshake included in timeout.
func DialTLS(addr string, timeout time.Duration, cfg *tls.Config) (*Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return NewConn(c, timeout), nil
	}
	tc := tls.Client(c, cfg)
	tc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	tc.SetDeadline(time.Time{})
	return NewConn(tc, timeout), nil
}

// NewConn makes a channel connection of an established connection (one
// dialled from another network namespace, for example).
func NewConn(c net.Conn, timeout time.Duration) *Conn {
	return &Conn{c: c, br: bufio.NewReader(c), timeout: timeout}
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Send writes one frame holding telegram t.
func (c *Conn) Send(t []byte) error {
	c.c.SetWriteDeadline(time.Now().Add(c.timeout))
	_, err := c.c.Write(lhstd.AppendFrame(nil, t))
	return err
}

// SendRaw writes bytes as they are (for malformed frames).
func (c *Conn) SendRaw(b []byte) error {
	c.c.SetWriteDeadline(time.Now().Add(c.timeout))
	_, err := c.c.Write(b)
	return err
}

// Receive reads one reply frame.
func (c *Conn) Receive() ([]byte, error) {
	c.c.SetReadDeadline(time.Now().Add(c.timeout))
	return lhstd.ReadFrame(c.br)
}

// RoundTrip sends t and waits for the reply.
func (c *Conn) RoundTrip(t []byte) ([]byte, error) {
	if err := c.Send(t); err != nil {
		return nil, err
	}
	return c.Receive()
}

// Stats is the fixture core's GET /_stats.
type Stats struct {
	Transfers     int            `json:"transfers"`
	ByGUID        map[string]int `json:"by_guid"`
	AppliedByGUID map[string]int `json:"applied_by_guid"`
	LookupsByGUID map[string]int `json:"lookups_by_guid"`
	// TraceparentByGUID: the last traceparent the core received per GUID.
	TraceparentByGUID map[string]string `json:"traceparent_by_guid,omitempty"`
}

// FetchStats reads the fixture core's /_stats.
func FetchStats(ctx context.Context, coreURL string) (*Stats, error) {
	return FetchStatsVia(ctx, &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}, coreURL)
}

// FetchStatsVia reads the fixture core's /_stats through client.
func FetchStatsVia(ctx context.Context, client *http.Client, coreURL string) (*Stats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, coreURL+"/_stats", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("core stats: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("core stats: HTTP %d", resp.StatusCode)
	}
	var s Stats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return nil, fmt.Errorf("core stats: %w", err)
	}
	return &s, nil
}

// CoreCheck is what the core says about a set of GUIDs.
type CoreCheck struct {
	GUIDs         int      // GUIDs checked
	Applied       int      // applied at least once
	AppliedTwice  int      // applied more than once: double debits
	ReceivedTwice int      // POSTed more than once (may be legitimate, see docs/core-api.md)
	Doubles       []string // the GUIDs applied more than once
}

// Check counts, over guids, the ones the core applied or received more
// than once.
func (s *Stats) Check(guids []string) CoreCheck {
	cc := CoreCheck{GUIDs: len(guids)}
	for _, g := range guids {
		if n := s.AppliedByGUID[g]; n > 0 {
			cc.Applied++
			if n > 1 {
				cc.AppliedTwice++
				cc.Doubles = append(cc.Doubles, g)
			}
		}
		if s.ByGUID[g] > 1 {
			cc.ReceivedTwice++
		}
	}
	return cc
}

// CloseWrite half-closes the connection: the relay sees end of file.
func (c *Conn) CloseWrite() error {
	if tc, ok := c.c.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return c.c.Close()
}
