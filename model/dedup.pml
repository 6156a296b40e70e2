/*
 * dedup.pml: the relay's money-safety protocol for one GUID, checked
 * exhaustively with SPIN (scripts/model.sh; docs/model.md maps every
 * transition to docs/ledger.md and to the code).
 *
 * Processes: two relay holders (each may crash at any point and restart
 * with no memory, and may freeze between its claim and its send), a
 * channel that sends the same telegram COPIES times (retransmissions, some
 * concurrent) and may lose replies, the orphan sweep, resolve, reprocess
 * (with its attempt cap), purge, and a non-idempotent core that may apply a
 * request, reject it, answer 500, drop the connection before or after
 * applying it, refuse the connection, or still be processing it when the
 * caller times out (and apply it later).
 *
 * The ledger is one row: state, rsp, attempts and a logical updated_at
 * (upd, bumped by every write). Each statement of docs/ledger.md is one
 * atomic step.
 *
 * Time is abstracted into the orderings that matter:
 *  - The lease is shorter than --orphan-after: the sweep may move a SENT
 *    row only when its holder can no longer write its request (live[e]
 *    false: lease over, or the holder crashed) and is not inside its
 *    exchange with the core (inflight[e] false: lease + timeout <
 *    orphan-after). A holder that freezes between claim and send resumes
 *    with its lease over (live[e] false).
 *  - --min-age exceeds the core's longest processing: resolve inquires
 *    only when the core holds no request still being processed
 *    (pending == 0).
 *  - Retention exceeds the channel's longest retransmission: purge deletes
 *    only when every copy the channel sent has been handled.
 *
 * Mutants (each must fail with a trail), one macro each:
 *  MUT_SELECT_INSERT      the claim reads, then inserts if absent (two steps)
 *  MUT_NO_FENCE           finish without the attempts fence
 *  MUT_NO_LEASE           a frozen holder sends after resuming
 *  MUT_NO_MINAGE          resolve without --min-age
 *  MUT_REPROCESS_UNKNOWN  reprocess selects UNKNOWN rows too
 *  MUT_PURGE_UNKNOWN      purge deletes UNKNOWN rows too
 *  MUT_RESET_FAILED       a reset after the send is taken for FAILED/E902
 *  MUT_GRACEFUL_CLOSE     a connection given up on is closed gracefully: the
 *                         kernel keeps the request and delivers it when the
 *                         link heals (rule 12)
 *  MUT_SETTLE_NO_FENCE    an operator's approval changes the row without
 *                         checking that it is still as proposed (settle)
 *  MUT_NO_CONFIRM         a holder paused (its monotonic clock stood still)
 *                         sends without confirming its claim on the
 *                         ledger's clock (rule 13)
 *
 * Two faults of time and links (docs/rules.md rules 12 and 13):
 *  - a broken link: the request is written but never acknowledged; the
 *    holder gives up (E901). With TCP_USER_TIMEOUT and the abort, nothing
 *    of it is left anywhere; under MUT_GRACEFUL_CLOSE it stays in the
 *    sender's kernel (stuck) and may reach the core at any later moment,
 *    long after --min-age.
 *  - a paused VM: the holder stops between its claim and its send, and its
 *    lease looks unspent when it resumes (live stays true), while the
 *    ledger's clock went on: the sweep may take the claim meanwhile. The
 *    holder's confirmation (SENT with its attempts, just before the first
 *    byte) is atomic with the write here; the microseconds between them in
 *    reality are the window only a fencing core could close (docs/rules.md).
 */

/* The row's states (NONE: no row). */
mtype = { NONE, SENT, DONE, UNKNOWN, FAILED };

/* Response codes, as far as the protocol tells them apart:
 * R_OK 0000 (applied); R_REJ B2xx or E500 (final, not applied); R_E901
 * unknown; R_E902 not sent; R_E903 in progress; R_LEASE (internal) refused
 * for the lease, nothing written, answered E902. */
mtype = { R_NONE, R_OK, R_REJ, R_E901, R_E902, R_E903, R_LEASE, R_E905 };

#define CAP     3   /* reprocess --max-attempts */
#define COPIES  2   /* the channel's sends of the telegram (two relays may take them at once) */
#ifdef SETTLE
/* The operator's decision joins the protocol (scripts/model.sh checks this
 * configuration on its own): with smaller budgets of the other faults, so
 * that the search stays whole. */
#define FAULTS  1
#else
#define FAULTS  2   /* core faults in all: refused, dropped, reset after applying, late */
#endif

/* the ledger row */
mtype st = NONE, rsp = R_NONE;
byte att = 0, upd = 0;
bool live[CAP + COPIES + 1];/* the holder of claim e may still write its request */
bool inflight[CAP + COPIES + 1];/* the holder of claim e is inside its exchange with the core */

/* the core */
byte applied = 0;        /* applications of the transfer */
byte pending = 0;        /* requests still being processed after their caller timed out */
byte faults = FAULTS;

/* faults of the holders, in all */
#ifdef SETTLE
byte crashes = 0;
#else
byte crashes = 1;        /* a holder dies */
#endif
#ifdef SETTLE
byte stalls = 0;
#else
byte stalls = 1;         /* a holder stops between claim and send: frozen past its lease, or its VM paused */
#endif
bool paused[CAP + COPIES + 1];/* the holder of claim e is paused: its claim looks orphaned on the ledger's clock */
byte stuck = 0;          /* requests a broken link left in a sender's kernel (only under MUT_GRACEFUL_CLOSE) */

/* the channel */
chan toRelay = [COPIES] of { bit };
chan toChan = [COPIES] of { mtype };
mtype told = R_NONE;      /* the final code the channel was told, if any */
bool windowOver = false; /* the channel sends no more copies */
byte busy = 0;           /* copies a relay is handling */
mtype purged = NONE;     /* the state of the row purge deleted */

/* the core receives the request of claim e and answers res */
inline core(e, res) {
	atomic {
		inflight[e] = true;
		if
		:: res = R_OK; applied++; printf("core: applies the request of attempt %d\n", e)
		:: res = R_REJ; printf("core: rejects the request of attempt %d\n", e)
		:: faults > 0 -> faults--; res = R_E902; printf("core: refuses the connection (nothing received)\n")
		:: faults > 0 -> faults--; applied++; res = R_E901; printf("core: applies attempt %d, then resets the connection\n", e)
		:: faults > 0 -> faults--; res = R_E901; printf("core: resets the connection of attempt %d without applying\n", e)
		:: faults > 0 -> faults--; pending++; res = R_E901; printf("core: still processing attempt %d when its caller times out\n", e)
#ifdef MUT_GRACEFUL_CLOSE
		/* With the abort (rule 12) a broken link is "reset without
		 * applying" above, so the correct model needs no option of its own. */
		:: faults > 0 -> faults--; res = R_E901; stuck++;
			printf("link: broken; the request of attempt %d stays in the sender's kernel after the holder gives up\n", e)
#endif
		fi;
		/* (1) the core applies each GUID at most once; (2) never after "rejected" */
		assert(applied <= 1);
		assert(!(applied > 0 && (told == R_REJ || told == R_E905)));
#ifdef MUT_RESET_FAILED
		if
		:: res == R_E901 -> res = R_E902
		:: else -> skip
		fi
#endif
	}
}

/* the holder of claim e sends, subject to its lease and, on resuming from
 * a pause, to its confirmation on the ledger's clock */
inline send(e, res) {
	if
	:: atomic { stalls > 0 -> stalls--; live[e] = false }; printf("holder of attempt %d: frozen past its lease\n", e)
	:: atomic { stalls > 0 -> stalls--; paused[e] = true; printf("holder of attempt %d: its VM is paused (its own clock stands still)\n", e) };
		paused[e] = false; printf("holder of attempt %d: resumes, its lease looks unspent\n", e)
	:: skip
	fi;
#ifdef MUT_NO_LEASE
	if
	:: true ->
#elif defined(MUT_NO_CONFIRM)
	if
	:: live[e] ->
#else
	if
	:: atomic { live[e] && st == SENT && att == e -> core(e, res) };
		goto sent
	:: atomic { live[e] && !(st == SENT && att == e) -> res = R_LEASE;
		printf("holder of attempt %d: the claim is no longer its own on the ledger: nothing written\n", e) };
		goto unsent
	:: false ->
#endif
		core(e, res);
sent:
		atomic { inflight[e] = false; live[e] = false }  /* the exchange is over; time passes */
		atomic { inflight[e] = false; live[e] = false }  /* the exchange is over; time passes */
	:: else -> res = R_LEASE; printf("holder of attempt %d: lease over, nothing written\n", e)
	fi;
unsent:
	skip
}

/* the holder of claim e records res, fenced: FINISH of docs/ledger.md */
inline finish(e, res, recorded) {
	atomic {
#ifdef MUT_NO_FENCE
		if
		:: st == SENT ->
#else
		if
		:: st == SENT && att == e ->
#endif
			if
			:: res == R_OK || res == R_REJ -> st = DONE; rsp = res
			:: res == R_E901 -> st = UNKNOWN; rsp = R_E901
			:: res == R_E902 || res == R_LEASE -> st = FAILED; rsp = R_E902
			fi;
			upd++; recorded = true;
			printf("finish of attempt %d: records %e (row %e)\n", e, res, st)
		:: else -> recorded = false; printf("finish of attempt %d: fenced out, nothing changed\n", e)
		fi
	}
}

/* the reply after a send: record, then reply (rule 10) */
inline outcome(res, recorded, code) {
	if
	:: recorded && res == R_LEASE -> code = R_E902
	:: recorded && res != R_LEASE -> code = res
	:: !recorded && res == R_OK -> code = R_OK
	:: !recorded && res == R_LEASE -> code = R_E902
	:: !recorded && res != R_OK && res != R_LEASE -> code = R_E901
	fi
}

inline reply(code) {
	if
	:: toChan!code
	:: printf("relay: the channel hung up; reply %e lost\n", code)  /* hang-up: never cancels the transaction */
	fi
}

proctype Relay(byte id) {
	byte mine;
	mtype res, code, seen, seenRsp;
	bool claimed, recorded;
end:
	do
	:: atomic { toRelay?_ -> busy++ };
		/* CLAIM: INSERT ... ON CONFLICT DO NOTHING */
#ifdef MUT_SELECT_INSERT
		seen = st;
		printf("relay %d: reads the row: %e\n", id, seen);
		if
		:: seen == NONE -> atomic { st = SENT; rsp = R_NONE; att = 1; upd++; mine = 1; live[1] = true; claimed = true;
			printf("relay %d: inserts the claim (attempt 1)\n", id) }
		:: else -> claimed = false
		fi;
#else
		atomic {
			if
			:: st == NONE -> st = SENT; rsp = R_NONE; att = 1; upd++; mine = 1; live[1] = true; claimed = true;
				printf("relay %d: claims the GUID (attempt 1)\n", id)
			:: else -> claimed = false
			fi
		}
#endif
		if
		:: atomic { crashes > 0 -> crashes-- }; goto crash
		:: skip
		fi;
		if
		:: claimed -> goto sending
		:: else
		fi;
		atomic { seen = st; seenRsp = rsp; printf("relay %d: the GUID has a row: %e %e\n", id, seen, seenRsp) }
		if
		:: seen == NONE -> code = R_E902   /* gone meanwhile: the channel retransmits */
		:: seen == SENT -> code = R_E903
		:: seen == DONE -> code = seenRsp
		:: seen == UNKNOWN -> code = R_E901
		:: seen == FAILED ->
			/* RECLAIM: UPDATE ... WHERE state='FAILED' AND rsp_code='E902' */
			atomic {
				if
				:: st == FAILED && rsp == R_E902 -> st = SENT; rsp = R_NONE; att++; upd++; mine = att; live[mine] = true; claimed = true;
					printf("relay %d: reclaims the FAILED row (attempt %d)\n", id, mine)
				:: else -> claimed = false
				fi
			}
			if
			:: claimed -> goto sending
			:: else -> code = R_E903
			fi
		fi;
		reply(code);
		goto done;
sending:
		send(mine, res);
		if
		:: atomic { crashes > 0 -> crashes-- }; goto crash
		:: skip
		fi;
		finish(mine, res, recorded);
		outcome(res, recorded, code);
		printf("relay %d: replies %e\n", id, code);
		reply(code);
		goto done;
crash:
		/* The process dies: its transaction and memory are gone. */
		printf("relay %d: crashes (and restarts with no memory)\n", id);
		atomic { live[mine] = false; inflight[mine] = false };
done:
		busy--
	od
}

proctype Channel() {
	byte n = 0;
	do
	:: n < COPIES -> toRelay!1; n++; printf("channel: sends the telegram (copy %d)\n", n)
	:: n == COPIES -> break
	od;
	windowOver = true
}

/* What the channel hears: (2) one final outcome, (3) 0000 only if applied once. */
active proctype Observer() {
	mtype code;
end:
	do
	:: toChan?code ->
		printf("channel: hears %e\n", code);
		if
		:: code == R_OK || code == R_REJ || code == R_E905 ->
			assert(told == R_NONE || told == code);
			told = code;
			assert(code != R_OK || applied == 1);
			assert(code != R_REJ || applied == 0);
			assert(code != R_E905 || applied == 0)
		:: else
		fi
	od
}

/* the core finishes what it was still processing: applies or rejects it */
active proctype CoreLate() {
end:
	do
	:: atomic {
		pending > 0 -> pending--;
		if
		:: applied++; printf("core: applies a late request\n")
		:: printf("core: rejects a late request\n")
		fi;
		assert(applied <= 1);
		assert(!(applied > 0 && (told == R_REJ || told == R_E905)))
	   }
	od
}

/* settle: one operator proposes a decision on a row inquiry could not
 * settle, on evidence that is true when it is proposed (the core's team
 * answers truthfully), and another approves it later, fenced on the row as
 * proposed (state, attempts, updated_at). Applied and not-applied are for
 * UNKNOWN rows (not-applied only once the core holds nothing that could
 * still land: rule 12's bound has passed); abandoned is for FAILED/E902
 * rows: DONE/E905, final, never sent. */
#ifdef SETTLE
active proctype Operator() {
	mtype from, to, code;
	byte pAtt, pUpd;
end:	/* a row may never need a person */
	atomic {
		if
		:: st == UNKNOWN && applied > 0 -> to = DONE; code = R_OK
		:: st == UNKNOWN && applied == 0 && pending == 0 && stuck == 0 -> to = FAILED; code = R_E902
		:: st == FAILED && rsp == R_E902 -> to = DONE; code = R_E905
		fi;
		from = st; pAtt = att; pUpd = upd;
		printf("settle: kim proposes %e/%e for the %e row (attempt %d)\n", to, code, from, pAtt)
	}
end_proposed:	/* the approval may never come (it expires) */
	atomic {
#ifdef MUT_SETTLE_NO_FENCE
		st == from ->
#else
		st == from && att == pAtt && upd == pUpd ->
#endif
		st = to; rsp = code; upd++;
		printf("settle: lee approves: the row is now %e/%e\n", st, rsp)
	}
}
#endif

/* a request a broken link left in a sender's kernel reaches the core when
 * the link heals, at any moment (MUT_GRACEFUL_CLOSE only) */
active proctype LateLink() {
end:
	do
	:: atomic {
		stuck > 0 -> stuck--; applied++; printf("link: heals; a request given up on reaches the core and is applied\n");
		assert(applied <= 1);
		assert(!(applied > 0 && told == R_REJ))
	   }
	od
}

/* SWEEP: SENT rows older than --orphan-after become UNKNOWN (a paused
 * holder's claim ages on the ledger's clock while its own stands still) */
active proctype Sweep() {
end:
	do
	:: atomic { st == SENT && ((!live[att] && !inflight[att]) || paused[att]) -> st = UNKNOWN; rsp = R_E901; upd++;
		printf("sweep: the orphaned claim of attempt %d becomes UNKNOWN\n", att) }
	od
}

/* resolve: select (snapshot), inquire, fenced settle */
active proctype Resolve() {
	byte sAtt, sUpd;
	bool found;
end:
	do
	:: atomic { st == UNKNOWN -> sAtt = att; sUpd = upd }
#ifndef MUT_NO_MINAGE
		pending == 0;  /* --min-age: the core's longest processing is over */
#endif
		if
		:: applied > 0 -> found = true
		:: applied == 0 -> found = false
		:: goto end    /* no proof (5xx, timeout, bare 404): the row stays */
		fi;
		atomic {
			if
			:: st == UNKNOWN && att == sAtt && upd == sUpd ->
				if
				:: found -> st = DONE; rsp = R_OK
				:: else -> st = FAILED; rsp = R_E902
				fi;
				upd++; printf("resolve: resolves the row as %e\n", st)
			:: else -> printf("resolve: the row changed since selected; left alone\n")
			fi
		}
	od
}

/* reprocess: reclaim FAILED/E902 below the cap, send, finish */
active proctype Reprocess() {
	byte mine;
	mtype res, from;
	bool claimed, recorded;
end:
	do
	:: atomic {
#ifdef MUT_REPROCESS_UNKNOWN
		((st == FAILED && rsp == R_E902) || st == UNKNOWN) && att < CAP ->
#else
		st == FAILED && rsp == R_E902 && att < CAP ->
#endif
		from = st; st = SENT; rsp = R_NONE; att++; upd++; mine = att; live[mine] = true;
		printf("reprocess: reclaims the %e row (attempt %d)\n", from, mine) }
		/* (4) an UNKNOWN row is never sent */
		assert(from != UNKNOWN);
		send(mine, res);
		finish(mine, res, recorded)
	od
}

/* purge: delete DONE rows past the retention */
active proctype Purge() {
end:
	do
	:: atomic {
#ifdef MUT_PURGE_UNKNOWN
		windowOver && len(toRelay) == 0 && busy == 0 && (st == DONE || st == UNKNOWN) ->
#else
		windowOver && len(toRelay) == 0 && busy == 0 && st == DONE ->
#endif
		purged = st; st = NONE; printf("purge: deletes the %e row\n", purged) }
	od
}

/* (5) once nothing else can happen (the faults' budgets are spent and the
 * core answers), the GUID is final: DONE, or FAILED with its attempts
 * exhausted, or purged after DONE; and the ledger agrees with the core. */
active proctype Final() {
	timeout ->
	assert(pending == 0 && stuck == 0);
	assert(st == DONE || (st == FAILED && rsp == R_E902 && att >= CAP) || (st == NONE && purged == DONE));
	assert(!(st == DONE && rsp == R_OK) || applied == 1);
	assert(!(st == DONE && rsp == R_REJ) || applied == 0);
	assert(!(st == DONE && rsp == R_E905) || applied == 0);
	assert(!(st == FAILED) || applied == 0)
}

init {
	atomic {
		run Relay(1);
		run Relay(2);
		run Channel()
	}
}
