-- wrk script: POST /publish with a fixed body of N small messages (N = the first argument
-- after `--`, 100 by default); N = 1 posts a single publish's object instead of an array.
--   wrk -t2 -c64 -d8s -s scripts/publish-batch.lua http://127.0.0.1:8080/publish -- 100
-- Messages per second = wrk's Requests/sec × N; wrk's "Non-2xx" line counts refused requests
-- (an answer of 200 holds one element per message, each stored: no msg_id, one topic).

function init(args)
  local size = tonumber(args[1] or "100")
  local item = '{"topic":"bench.t","payload":{"n":1,"pad":"xxxxxxxxxxxxxxxx"}}'
  if size == 1 then
    wrk.body = item
  else
    local items = {}
    for i = 1, size do items[i] = item end
    wrk.body = "[" .. table.concat(items, ",") .. "]"
  end
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

