package coreapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync/atomic"
	"time"
)

// errStalled is the cause of a journal download that received no byte for
// the client's timeout.
var errStalled = errors.New("no bytes from the core")

// Journal fetches the core's journal of business date date (YYYYMMDD;
// GET /v1/journal?date=, docs/core-api.md) and returns its body to be
// read to its end. Obtaining a connection is bounded by the connect
// timeout; from then on the timeout bounds each wait for the next bytes,
// not the whole download, which may be long. An answer other than 200
// text/csv, or one whose end could not be told from an early close (no
// length and not chunked), is an error. A body cut short reads as an
// error, never as an end.
func (c *Client) Journal(ctx context.Context, date string) (io.ReadCloser, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	var got atomic.Bool
	timer := time.AfterFunc(c.connectTimeout, func() {
		if got.Load() {
			cancel(fmt.Errorf("%w for %s", errStalled, c.timeout))
		} else {
			cancel(errConnectTimeout)
		}
	})
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
		if got.CompareAndSwap(false, true) {
			timer.Reset(c.timeout)
		}
	}}
	fail := func(err error) (io.ReadCloser, error) {
		timer.Stop()
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w (%v)", cause, err)
		}
		cancel(nil)
		return nil, fmt.Errorf("journal of %s from %s: %w", date, c.base, err)
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, c.base+"/v1/journal?date="+date, nil)
	if err != nil {
		return fail(err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fail(err)
	}
	timer.Reset(c.timeout)
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case resp.StatusCode != http.StatusOK:
		head, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		resp.Body.Close()
		return fail(fmt.Errorf("the core answered HTTP %d (%q), not 200", resp.StatusCode, head))
	case mediaType != "text/csv":
		resp.Body.Close()
		return fail(fmt.Errorf("the core answered %q, not text/csv", resp.Header.Get("Content-Type")))
	case resp.ContentLength < 0 && !slices.Contains(resp.TransferEncoding, "chunked"):
		resp.Body.Close()
		return fail(errors.New("the core's answer has no length and is not chunked: an early close could not be told from its end"))
	}
	return &journalBody{body: resp.Body, timer: timer, timeout: c.timeout, ctx: ctx, cancel: cancel}, nil
}

// journalBody is a journal download: each read that brings bytes gives the
// core another timeout for the next ones.
type journalBody struct {
	body    io.ReadCloser
	timer   *time.Timer
	timeout time.Duration
	ctx     context.Context
	cancel  context.CancelCauseFunc
}

func (j *journalBody) Read(p []byte) (int, error) {
	n, err := j.body.Read(p)
	if n > 0 {
		j.timer.Reset(j.timeout)
	}
	if err != nil && err != io.EOF {
		if cause := context.Cause(j.ctx); cause != nil {
			err = fmt.Errorf("%w (%v)", cause, err)
		}
		err = fmt.Errorf("the journal ended early: %w", err)
	}
	return n, err
}

// Close closes the download; one not read to its end is aborted.
func (j *journalBody) Close() error {
	j.timer.Stop()
	err := j.body.Close()
	j.cancel(nil)
	return err
}
