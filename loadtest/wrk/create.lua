-- The lean client of scripts/bench's throughput rows: wrk sends
-- POST /transfers with a new Idempotency-Key per request, so every request
-- creates one transfer. wrk costs about a third of payrail-loadtest's CPU
-- per request; on a 2-core machine the client's CPU is taken from the
-- engine, as pgbench's is taken from the baselines it drives.
--
--   PAYRAIL_API_KEY=... wrk -t2 -c64 -d15s -s loadtest/wrk/create.lua URL -- RUN_ID
--
-- It checks nothing beyond the status: scripts/bench verifies the outcome in
-- Postgres and provider-sim (one transfer per 201, each executed once), and
-- payrail-loadtest remains the verifying client of the other rows.
-- done() prints one line: WRK created=N other=N lagging=N p50_ms=X p99_ms=X p999_ms=X
-- seconds=X.

local threads = {}

function setup(thread)
    table.insert(threads, thread)
    thread:set("tid", #threads)
end

function init(args)
    local key = os.getenv("PAYRAIL_API_KEY")
    if key == nil or key == "" then
        error("PAYRAIL_API_KEY is not set")
    end
    prefix = string.format("wrk-%s-%d-", args[1] or "run", tid)
    counter = 0
    created = 0
    other = 0
    -- 503 settlement-lagging: the engine refusing new transfers while its
    -- settlement is behind (a bound, not an error); counted apart.
    lagging = 0
    wrk.method = "POST"
    wrk.headers["Authorization"] = "Bearer " .. key
    wrk.headers["Content-Type"] = "application/json"
end

function request()
    counter = counter + 1
    -- The body is of the size payrail-loadtest sends (description and two
    -- metadata entries), so the stored answer is as large as in its rows.
    local body = string.format(
        '{"amount":%d,"currency":"USD","source_account":"wrk_src_%d","destination_account":"wrk_dst_%d",'
            .. '"description":"wrk %s%d","metadata":{"run":"%s","intent":"%d"}}',
        1 + counter % 1000000, counter % 1000, tid, prefix, counter, prefix, counter)
    wrk.headers["Idempotency-Key"] = prefix .. counter
    return wrk.format(nil, "/transfers", nil, body)
end

function response(status, headers, body)
    if status == 201 then
        created = created + 1
    elseif status == 503 and string.find(body, "settlement-lagging", 1, true) then
        lagging = lagging + 1
    else
        other = other + 1
        if other <= 3 then
            io.stderr:write(string.format("wrk: HTTP %d: %s\n", status, body))
        end
    end
end

function done(summary, latency, requests)
    local c, o, l = 0, 0, 0
    for _, t in ipairs(threads) do
        c = c + t:get("created")
        o = o + t:get("other")
        l = l + t:get("lagging")
    end
    io.write(string.format("WRK created=%d other=%d lagging=%d p50_ms=%.2f p99_ms=%.2f p999_ms=%.2f seconds=%.3f\n",
        c, o, l, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
        latency:percentile(99.9) / 1000, summary.duration / 1e6))
end
