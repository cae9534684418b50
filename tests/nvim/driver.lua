-- Test driver: starts the Neovim under test (headless, embedded, plugin on the runtimepath) and relays
-- JSON-line commands from stdin to it over msgpack-RPC, answering each with one JSON line on stdout.
-- Run as: nvim -l tests/nvim/driver.lua NVIM RTP [extra --cmd ...]
-- Commands: {"lua": code, "args": [...]}  -> result of nvim_exec_lua in the child
--           {"input": keys}                -> nvim_input (typed like a user; returns at once)
--           {"wait": code, "args": [...], "timeout_ms": n}  -> polls code until it returns a truthy value
--           {"quit": true}
local nvim, rtp = arg[1], arg[2]
local argv = { nvim, '--embed', '--headless', '-u', 'NONE', '-i', 'NONE', '-n', '--cmd', 'set rtp^=' .. rtp }

local chan = vim.fn.jobstart(argv, { rpc = true })
assert(chan > 0, 'could not start ' .. nvim)

local function call_lua(code, args)
  return vim.rpcrequest(chan, 'nvim_exec_lua', code, args or {})
end

local function wait(code, args, timeout_ms)
  local deadline = vim.uv.now() + (timeout_ms or 10000)
  local last
  repeat
    last = call_lua(code, args)
    if last and last ~= vim.NIL then
      return last
    end
    vim.uv.sleep(25)
    vim.uv.update_time()
  until vim.uv.now() > deadline
  error(('timed out after %d ms waiting for: %s (last: %s)'):format(timeout_ms or 10000, code, vim.inspect(last)))
end

local function handle(msg)
  if msg.lua then
    return call_lua(msg.lua, msg.args)
  elseif msg.input then
    return vim.rpcrequest(chan, 'nvim_input', msg.input)
  elseif msg.wait then
    return wait(msg.wait, msg.args, msg.timeout_ms)
  elseif msg.quit then
    pcall(vim.rpcrequest, chan, 'nvim_command', 'qa!')
    vim.fn.jobwait({ chan }, 5000)
    return true
  end
  error('unknown command')
end

while true do
  local line = io.read('*l')
  if not line then
    break
  end
  local ok, decoded = pcall(vim.json.decode, line, { luanil = { object = true, array = true } })
  local reply
  if not ok then
    reply = { ok = false, error = 'bad json: ' .. tostring(decoded) }
  else
    local ok2, result = pcall(handle, decoded)
    if ok2 then
      reply = { ok = true, result = result == nil and vim.NIL or result }
    else
      reply = { ok = false, error = tostring(result) }
    end
  end
  io.stdout:write(vim.json.encode(reply) .. '\n')
  io.stdout:flush()
  if decoded and type(decoded) == 'table' and decoded.quit then
    break
  end
end
