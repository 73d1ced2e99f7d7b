-- wrk script for the ingest benchmark: sends pre-built, pre-signed raw HTTP requests from a file
-- (separated by NUL bytes), each thread its own share, so no delivery is sent twice by two threads.
local requests = {}
local n = 0
local threads = 0

function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end

function init(args)
  local f = assert(io.open(args[1], "rb"))
  local data = f:read("*a")
  f:close()
  local count = tonumber(args[2])
  local pos, k = 1, 0
  while true do
    local s = string.find(data, "\0", pos, true)
    if not s then break end
    if k % count == id then
      requests[#requests + 1] = string.sub(data, pos, s - 1)
    end
    k = k + 1
    pos = s + 1
  end
end

function request()
  n = n + 1
  if n > #requests then n = 1 end
  return requests[n]
end
