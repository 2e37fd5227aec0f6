#!/usr/bin/env python3
"""The verification of scripts/cluster: the loadtest's report, SQL on the
surviving primary, provider-sim's /stats and HAProxy's log; prints a table
and exits 1 when an invariant broke.

Usage (scripts/cluster calls it): cluster-verify.py PSQL ARGS... with the
settings in CLUSTER_* environment variables. Only reads.

Table rows: `value` is what was measured, `must` the condition, the last
column `ok`, `FAIL`, or `info` for figures that are shown but not judged.
"""
import json
import os
import re
import subprocess
import sys
import urllib.request

psql = sys.argv[1:]
env = os.environ
logs = env["CLUSTER_LOGS"]
rows, violations = [], []


def sql(q, cmd=None):
    return subprocess.run((cmd or psql) + ["-c", q], check=True, capture_output=True, text=True).stdout.strip()


def row(check, value, must, ok):
    rows.append((check, str(value), must, "info" if ok is None else ("ok" if ok else "FAIL")))


# ---- the loadtest's report: its own read-back through HAProxy --------------
try:
    with open(f"{logs}/loadtest.json") as f:
        rep = json.load(f)
except (OSError, ValueError) as e:
    rep = None
    violations.append(f"the loadtest left no JSON report ({e}); see {logs}/loadtest.err")
lt_status = env["CLUSTER_LT_STATUS"]
if lt_status not in ("0", "1"):
    violations.append(f"the loadtest exited {lt_status} (2: could not run; 137: killed by the watchdog)")
intents = rep["intents"] if rep else 0
acked = rep["acknowledged"] if rep else 0
status = rep["status"] if rep else {}
ver = rep["verification"] if rep else {}
lt_violations = rep["invariants"]["violations"] if rep else []
for v in lt_violations:
    violations.append(f"loadtest: {v}")
if rep and rep["invariants"]["violation_count"] > len(lt_violations):
    violations.append(f"loadtest: {rep['invariants']['violation_count'] - len(lt_violations)} more not listed")

# ---- the surviving primary --------------------------------------------------
stored = int(sql("SELECT count(*) FROM transfers"))
dup_keys = int(sql("SELECT count(*) FROM (SELECT 1 FROM transfers GROUP BY client_id, idempotency_key HAVING count(*) > 1) d"))
keyless = int(sql("SELECT count(*) FROM transfers t WHERE NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.transfer_id = t.id)"))
dangling = int(sql("SELECT (SELECT count(*) FROM idempotency_keys k WHERE NOT EXISTS (SELECT 1 FROM transfers t WHERE t.id = k.transfer_id))"
                   " + (SELECT count(*) FROM outbox o WHERE NOT EXISTS (SELECT 1 FROM transfers t WHERE t.id = o.transfer_id))"))
pending = int(sql("SELECT count(*) FROM transfers WHERE status = 'pending'"))
outbox_left = int(sql("SELECT count(*) FROM outbox WHERE dead_at IS NULL"))
dead = int(sql("SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL"))
hooks = sql("SELECT count(*) FILTER (WHERE dead_at IS NULL), count(*) FILTER (WHERE dead_at IS NOT NULL) "
            "FROM webhook_deliveries WHERE delivered_at IS NULL")

with urllib.request.urlopen(env["SIM_URL"] + "/stats", timeout=10) as r:
    sim = json.load(r)
execs, distinct = sim.get("executions", -1), sim.get("distinct_ids", -1)

# ---- failovers: from the stop of the primary to the first write ------------
# A key row's created_at is the now() of the transaction that wrote it, on
# the database's clock (this machine's). The first row newer than the moment
# the old primary was gone was written by an engine on the new primary.
failovers = []
for i, f in enumerate(env.get("CLUSTER_FAILOVERS", "").split()):
    names, t0, t_stopped, t_promoted = f.split(":")
    first = sql(f"SELECT coalesce((extract(epoch FROM min(created_at)) * 1000)::bigint, 0) FROM idempotency_keys "
                f"WHERE created_at > to_timestamp({int(t_stopped)} / 1000.0)")
    first = int(first)
    write_ms = first - int(t0) if first else None
    failovers.append((names.replace(">", " -> "), int(t_promoted) - int(t0), write_ms))

# ---- the standby, when one is attached at the end ---------------------------
standby_port = env.get("CLUSTER_STANDBY_PORT", "")
standby = None
if standby_port:
    i = psql.index("-p")
    scmd = psql[: i + 1] + [standby_port] + psql[i + 2:]
    lsn = sql("SELECT pg_current_wal_lsn()")
    for _ in range(100):
        if sql(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'", scmd) == "t":
            break
        subprocess.run(["sleep", "0.2"])
    standby = (int(sql("SELECT count(*) FROM transfers", scmd)),
               int(sql("SELECT count(*) FROM idempotency_keys", scmd)),
               int(sql("SELECT count(*) FROM idempotency_keys")))

# ---- HAProxy's own answers ---------------------------------------------------
# `option httplog`: "... backend/server Tq/Tw/Tc/Tr/Ta status bytes - - TERM ...".
# The log shows the proxy's own status before the errorfile turned it into a
# 503: 502 (termination state SH/SD: the engine died mid-request), 504 (sH:
# it did not answer in time), 503 with <NOSRV> (no engine passed /readyz).
line_re = re.compile(r" (\S+)/(\S+) (-?\d+)/(-?\d+)/(-?\d+)/(-?\d+)/(-?\d+) (\d{3}) \d+ \S+ \S+ (\S{4}) ")
proxy = {"requests": 0, "engine died mid-request (502)": 0, "engine timeout (504)": 0,
         "no engine up (503)": 0, "engine 503s passed on": 0, "2xx": 0}
try:
    with open(f"{logs}/haproxy.log", errors="replace") as f:
        for line in f:
            m = line_re.search(line)
            if not m:
                continue
            proxy["requests"] += 1
            srv, code = m.group(2), m.group(8)
            if code.startswith("2"):
                proxy["2xx"] += 1
            elif code == "502":
                proxy["engine died mid-request (502)"] += 1
            elif code == "504":
                proxy["engine timeout (504)"] += 1
            elif code == "503":
                proxy["no engine up (503)" if srv == "<NOSRV>" else "engine 503s passed on"] += 1
except OSError as e:
    violations.append(f"no HAProxy log ({e})")

other_5xx = sum(v for k, v in status.items() if k.isdigit() and k.startswith("5") and k != "503")
kills, n_kill = map(int, env["CLUSTER_KILLS"].split())
long_run = env.get("CLUSTER_LONG") == "1"

row("intents sent", intents, "> 0", intents > 0)
row("acknowledged with a 201", acked, "= intents", acked == intents and intents > 0)
row("never acknowledged", intents - acked, "0", intents == acked)
row("acknowledged only after an unanswered attempt", rep["committed_unanswered"] if rep else "-", "", None)
row("loadtest verdict (read-back through HAProxy)", "ok" if rep and rep["invariants"]["ok"] else "violations",
    "ok", bool(rep) and rep["invariants"]["ok"])
row("transfers stored on the surviving primary", stored, "= read back by the loadtest",
    bool(rep) and stored == ver.get("transfers") and stored >= acked)
row("keys with more than one transfer", dup_keys, "0", dup_keys == 0)
row("transfers without their key row / rows naming no transfer", f"{keyless} / {dangling}", "0 / 0",
    keyless == 0 and dangling == 0)
row("transfers pending after the drain", pending, "0", pending == 0)
row("outbox rows left / dead-lettered", f"{outbox_left} / {dead}", "0 / 0", outbox_left == 0 and dead == 0)
row("webhook deliveries pending / dead", hooks.replace("|", " / "), "0 / 0", hooks == "0|0")
row("provider executions / distinct ids", f"{execs} / {distinct}", "= transfers stored", execs == distinct == stored)
row("answers seen by clients: 503 / timeouts / conn. errors",
    f"{status.get('503', 0)} / {status.get('timeout', 0)} / {status.get('error', 0)}", "", None)
row("5xx other than 503 seen by clients", other_5xx, "0", other_5xx == 0)
row("HAProxy: requests / 2xx", f"{proxy['requests']} / {proxy['2xx']}", "", None)
for k in ("engine died mid-request (502)", "engine timeout (504)", "no engine up (503)", "engine 503s passed on"):
    row(f"HAProxy: {k}", proxy[k], "", None)
row("serve SIGKILLs + restarts", f"{kills} of {n_kill}", ">= 4", kills == n_kill and kills >= 4)
row("standby outages (primary waits, serve answers 503)", env.get("CLUSTER_OUTAGES"), "= 1", env.get("CLUSTER_OUTAGES") == "1")
want_failovers = 2 if long_run else 1
row("failovers (stop -m immediate + promote)", len(failovers), f"= {want_failovers}", len(failovers) == want_failovers)
for names, promote_ms, write_ms in failovers:
    row(f"  {names}: promoted, ms after the stop", promote_ms, "", None)
    row(f"  {names}: first engine write, ms after the stop", "none" if write_ms is None else write_ms,
        "<= 30000", write_ms is not None and write_ms <= 30000)
if long_run:
    row("rebuilds of the old primary as synchronous standby", env.get("CLUSTER_REBUILDS"), "= 2", env.get("CLUSTER_REBUILDS") == "2")
if standby:
    s_tr, s_keys, p_keys = standby
    row("standby at the end: transfers / key rows", f"{s_tr} / {s_keys}", "= primary", s_tr == stored and s_keys == p_keys)

w = [max(len(r[k]) for r in rows + [("check", "value", "must", "")]) for k in range(4)]
print()
print(f"| {'check'.ljust(w[0])} | {'value'.rjust(w[1])} | {'must'.ljust(w[2])} | {''.ljust(w[3])} |")
print(f"|{'-' * (w[0] + 2)}|{'-' * (w[1] + 2)}|{'-' * (w[2] + 2)}|{'-' * (w[3] + 2)}|")
for c, v, m, ok in rows:
    print(f"| {c.ljust(w[0])} | {v.rjust(w[1])} | {m.ljust(w[2])} | {ok.ljust(w[3])} |")
if violations:
    print(f"\nviolations ({len(violations)}):")
    for v in violations[:50]:
        print("  - " + v)
failed = bool(violations) or any(r[3] == "FAIL" for r in rows)
seed = env["CLUSTER_SEED"]
flag = " --long" if long_run else ""
print(f"\ncluster: {'FAILED' if failed else 'PASSED'} (seed {seed}, surviving primary {env['CLUSTER_PRIMARY']}); "
      f"re-run with: scripts/cluster --seed {seed}{flag}")
sys.exit(1 if failed else 0)
