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
from datetime import datetime

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

# ---- the faults: how long writes stopped ----------------------------------
# A key row's created_at is the now() of the transaction that wrote it, on
# the database's clock (this machine's). Within a fault's window (from its
# start to the pair being repaired) the longest pause between two commits
# is the write outage; the commit that ends it is the first write after
# the fault, on the new leader when the leader changed.
faults = []
for f in env.get("CLUSTER_FAULTS", "").split():
    kind, frm, to, t0, t_leader, t_primary, t_rep = f.split(":")
    t0, t_rep = int(t0), int(t_rep)
    commits = [int(x) for x in sql(
        "SELECT (extract(epoch FROM created_at) * 1000)::bigint FROM idempotency_keys "
        f"WHERE created_at >= to_timestamp({t0} / 1000.0) AND created_at <= to_timestamp({t_rep} / 1000.0) "
        "ORDER BY created_at").split()]
    prev, gap, first = t0, 0, None
    for c in commits:
        if c - prev > gap:
            gap, first = c - prev, c
        prev = c
    faults.append({
        "kind": kind, "from": frm, "to": to, "t0": t0, "t_rep": t_rep,
        "detect": None if t_leader == "-" else int(t_leader) - t0,
        "promote": None if t_primary == "-" else int(t_primary) - int(t_leader),
        "t_leader": None if t_leader == "-" else int(t_leader),
        "gap": gap, "first": None if first is None else first - t0, "commits": len(commits),
    })

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
def accept_ms(line):
    """The accept date of a HAProxy log line ([06/Dec/2026:13:45:01.123]), ms."""
    m = re.search(r"\[(\d+/\w+/\d+:\d+:\d+:\d+)\.(\d+)\]", line)
    if not m:
        return None
    return int(datetime.strptime(m.group(1), "%d/%b/%Y:%H:%M:%S").timestamp() * 1000) + int(m.group(2))



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
            if code.startswith("5"):
                t = accept_ms(line)
                for f in faults:
                    if t is not None and f["t0"] <= t <= f["t_rep"]:
                        f["5xx"] = f.get("5xx", 0) + 1
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

# The Postgres front (`option tcplog`): one line per connection, with its
# accept date and node. After a frozen leader lost its key, no engine may
# have connected to it until it was back as the synchronous standby.
late = {}
pg_line = re.compile(r"\] \S+ \S+/(node\d+) ")
try:
    with open(f"{logs}/haproxy-postgres.log", errors="replace") as f:
        for line in f:
            m = pg_line.search(line)
            t = accept_ms(line)
            if not m or t is None:
                continue
            for i, fz in enumerate(faults):
                # Until the pair was repaired: the thawed node is then a
                # replica, and a later fault may make it the leader again.
                if fz["kind"] == "freeze-leader" and m.group(1) == fz["from"] and fz["t_leader"] <= t <= fz["t_rep"]:
                    late[i] = late.get(i, 0) + 1
except OSError as e:
    violations.append(f"no log of HAProxy's Postgres front ({e})")

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
n_faults = int(env["CLUSTER_N_FAULTS"])
row("database faults done", len(faults), f"= {n_faults}", len(faults) == n_faults)
load_start, faults_end, window = map(int, env["CLUSTER_WINDOW"].split())
row("faults ended, s into the load window", round((faults_end - load_start) / 1000), f"<= {window - 15}",
    faults_end - load_start <= (window - 15) * 1000)
for i, f in enumerate(faults):
    name = f"  {f['kind']} ({f['from']} -> {f['to']})"
    moves = f["kind"] in ("switchover", "kill-leader", "freeze-leader")
    if moves:
        row(f"{name}: leader key moved, ms after the fault", f["detect"], "", None)
        row(f"{name}: new leader answers /primary, ms later", f["promote"], "", None)
        row(f"{name}: first write, ms after the fault", "none" if f["first"] is None else f["first"],
            "<= 60000", f["first"] is not None and f["first"] <= 60000 and f["from"] != f["to"])
    else:
        # No failover may come of it, and writes go on.
        row(f"{name}: longest pause between commits, ms", f["gap"], "<= 3000, same leader",
            f["gap"] <= 3000 and f["from"] == f["to"])
    row(f"{name}: 5xx answers of the engines' proxy", f.get("5xx", 0), "", None)
    if f["kind"] == "freeze-leader":
        row(f"{name}: connections to the frozen node after the key moved", late.get(i, 0), "0", late.get(i, 0) == 0)
if standby:
    s_tr, s_keys, p_keys = standby
    row("synchronous standby at the end: transfers / key rows", f"{s_tr} / {s_keys}", "= primary", s_tr == stored and s_keys == p_keys)

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
