-- Starting, finding and restarting the infill-ls client; server status; telemetry.
local config = require('infill.config')
local util = require('infill.util')

local M = {}

M.name = 'infill'

---@class infill.ServerState
M.state = {
  enabled = false, -- setup() ran and the server can be started
  start_error = nil, ---@type string|nil  why the server cannot start at all
  status = nil, ---@type table|nil         last infill/statusChanged payload
  crashes = 0, -- consecutive crashes (a server that stayed up restart_stable_ms starts them afresh)
  up_since = nil, ---@type integer|nil  when the running server initialized (vim.uv.now())
  gave_up = false,
  exiting = false,
  last_exit = nil, ---@type string|nil
  log = {}, ---@type string[]  the server's latest window/logMessage lines
}

local LOG_KEEP = 50


local restart_timer = nil ---@type uv.uv_timer_t|nil
local stopping = {} ---@type table<integer, boolean> clients we stopped on purpose

local function notify_once(msg, level)
  vim.schedule(function()
    vim.notify(msg, level or vim.log.levels.ERROR, { title = 'infill' })
  end)
end

local watch_buffer -- defined below

--- Attach only to real, named, reasonably sized, valid UTF-8 files; one server for all of them.
local function root_dir(bufnr, on_dir)
  local ok, why = util.buffer_eligible(bufnr, config.current.max_buffer_bytes)
  if not ok then
    vim.b[bufnr].infill_skipped = why
    return
  end
  vim.b[bufnr].infill_skipped = nil
  watch_buffer(bufnr) -- before vim.lsp attaches, so our line callback runs ahead of its didChange
  on_dir(vim.fs.root(bufnr, { '.git' }) or vim.fn.getcwd())
end

local function on_status(_, result, ctx)
  if type(result) ~= 'table' then
    return
  end
  local previous = M.state.status
  M.state.status = result
  if result.state == 'error' and not (previous and previous.state == 'error') then
    notify_once('infill: the server reports an error: ' .. tostring(result.error or 'unknown'))
  end
  vim.api.nvim_exec_autocmds('User', { pattern = 'InfillStatus', data = { client_id = ctx.client_id, status = result } })
end

local function on_log_message(err, result, ctx)
  if type(result) == 'table' and result.message then
    table.insert(M.state.log, result.message)
    if #M.state.log > LOG_KEEP then
      table.remove(M.state.log, 1)
    end
  end
  return vim.lsp.handlers['window/logMessage'](err, result, ctx)
end

local function schedule_restart()
  local cfg = config.current
  if M.state.crashes > cfg.restart_max then
    M.state.gave_up = true
    notify_once(
      ('infill: infill-ls exited %d times in a row (%s); not restarting. Fix the cause, then :InfillRestart.'):format(
        M.state.crashes,
        M.state.last_exit or '?'
      )
    )
    return
  end
  local delay = cfg.restart_base_ms * 2 ^ (M.state.crashes - 1)
  if restart_timer then
    restart_timer:stop()
    restart_timer:close()
  end
  restart_timer = vim.defer_fn(function()
    restart_timer = nil
    if M.state.enabled and not M.state.exiting then
      vim.lsp.enable(M.name) -- re-runs the attach logic for every open buffer
    end
  end, delay)
end

local function on_exit(code, signal, client_id)
  if stopping[client_id] or M.state.exiting then
    stopping[client_id] = nil
    return
  end
  if code == 0 and signal == 0 then
    return
  end
  -- Only a server that stayed up a while counts as recovered: one that dies after initializing (killed for memory
  -- while loading its model, say) must still run into restart_max instead of restarting forever.
  local up_ms = M.state.up_since and (vim.uv.now() - M.state.up_since) or 0
  M.state.up_since = nil
  if up_ms >= config.current.restart_stable_ms then
    M.state.crashes = 0
  end
  M.state.crashes = M.state.crashes + 1
  M.state.last_exit = ('exit code %d, signal %d'):format(code, signal)
  vim.schedule(schedule_restart)
end

local function on_init(_client, _result)
  M.state.up_since = vim.uv.now()
  M.state.gave_up = false
end

--- Settings as a JSON object even when empty (an empty Lua table would be sent as []).
local function settings_object(settings)
  return next(settings) and settings or vim.empty_dict()
end

--- Registers the vim.lsp config and enables it (or records why it cannot start).
function M.start()
  local cfg = config.current
  local cmd = config.command()
  M.state.start_error = nil
  if vim.fn.executable(cmd[1]) ~= 1 then
    M.state.start_error = ('cannot start %q: not found or not executable. Set cmd in require("infill").setup{...}'):format(
      cmd[1]
    )
    M.state.enabled = false
    notify_once('infill: ' .. M.state.start_error .. '. Inline suggestions are off.')
    return false
  end
  vim.lsp.config(M.name, {
    cmd = cmd,
    filetypes = cfg.filetypes,
    root_dir = root_dir,
    reuse_client = function(client, conf)
      return client.name == conf.name and not client:is_stopped()
    end,
    init_options = settings_object(cfg.settings),
    settings = { infill = settings_object(cfg.settings) },
    capabilities = {
      textDocument = { inlineCompletion = { dynamicRegistration = false } },
    },
    handlers = { ['infill/statusChanged'] = on_status, ['window/logMessage'] = on_log_message },
    on_init = on_init,
    on_exit = on_exit,
  })
  M.state.enabled = true
  vim.lsp.enable(M.name)
  return true
end

--- Stops every infill client on purpose (no restart).
function M.stop()
  for _, client in ipairs(vim.lsp.get_clients({ name = M.name })) do
    stopping[client.id] = true
    client:stop()
  end
end

function M.restart()
  M.stop()
  M.state.crashes = 0
  M.state.gave_up = false
  vim.defer_fn(function()
    M.start()
  end, 100)
end

--- The initialized infill client attached to `bufnr`, if any.
---@return vim.lsp.Client|nil
function M.get_client(bufnr)
  for _, client in ipairs(vim.lsp.get_clients({ name = M.name, bufnr = bufnr })) do
    if client.initialized and not client:is_stopped() then
      return client
    end
  end
  return nil
end

--- Sends workspace/didChangeConfiguration with the current settings, and keeps them in the vim.lsp config so a
--- server restarted after a crash starts with them too.
function M.push_settings()
  if M.state.enabled then
    local settings = settings_object(config.current.settings)
    vim.lsp.config(M.name, { init_options = settings, settings = { infill = settings } })
  end
  for _, client in ipairs(vim.lsp.get_clients({ name = M.name })) do
    client.settings = { infill = settings_object(config.current.settings) }
    client:notify('workspace/didChangeConfiguration', { settings = client.settings })
  end
end

--- Sends a telemetry notification in Copilot's shape (textDocument/didShowCompletion,
--- textDocument/didPartiallyAcceptCompletion); fire and forget, and it stays on this machine.
---@param client vim.lsp.Client
---@param method string
---@param params table
function M.telemetry(client, method, params)
  if not config.current.telemetry or client:is_stopped() then
    return
  end
  client:notify(method, params)
end

local cursor_lines = {} ---@type table<integer, integer>  buffer -> the line last sent in infill/didMoveCursor

--- Tells the server the cursor of `bufnr` is on another line than last time (or the buffer was entered), so it
--- warms the prompt there in the background before anyone types (the server cancels it at the first keystroke).
---@param bufnr integer
function M.cursor_moved(bufnr)
  local client = M.get_client(bufnr)
  if not client then
    return
  end
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  if cursor_lines[bufnr] == params.position.line then
    return
  end
  cursor_lines[bufnr] = params.position.line
  client:notify('infill/didMoveCursor', params)
end

--- The buffer was left: the next time it is entered its cursor is sent again.
---@param bufnr integer
function M.cursor_left(bufnr)
  cursor_lines[bufnr] = nil
end

local watched = {} ---@type table<integer, table>  buffer -> the token of its one live watcher

--- Detaches the infill client from `bufnr` for good (until it is reopened) and says why, once.
local function detach(bufnr, why)
  vim.b[bufnr].infill_skipped = why
  for _, client in ipairs(vim.lsp.get_clients({ name = M.name, bufnr = bufnr })) do
    vim.lsp.buf_detach_client(bufnr, client.id) -- drops the pending didChange: the server never sees the bytes
  end
  notify_once(('infill: %s; stopped serving buffer %d'):format(why, bufnr), vim.log.levels.WARN)
end

--- Watches changed lines of a served buffer: invalid UTF-8 pasted in later detaches the server from it. Registered
--- before vim.lsp attaches, this callback runs first, so the bytes never go out in a didChange. One watcher per
--- buffer for the buffer's life: not tied to a client (on a restart the old client's LspDetach can arrive after the
--- new one attached, and clearing then left the buffer unwatched).
function watch_buffer(bufnr)
  if watched[bufnr] then
    return
  end
  local token = {} -- a watcher whose token was replaced (a restart watches again) stops at its next call
  watched[bufnr] = token
  vim.api.nvim_buf_attach(bufnr, false, {
    on_lines = function(_, buf, _, first, _, last_new)
      if watched[buf] ~= token then
        return true -- stop watching
      end
      local text = table.concat(vim.api.nvim_buf_get_lines(buf, first, last_new, false), '\n')
      if not util.is_utf8_text(text) then
        watched[buf] = nil
        if not pcall(detach, buf, 'buffer is not valid UTF-8') then
          vim.schedule(function()
            detach(buf, 'buffer is not valid UTF-8')
          end)
        end
        return true
      end
    end,
    on_detach = function(_, buf)
      if watched[buf] == token then
        watched[buf] = nil
      end
    end,
  })
end

local group = vim.api.nvim_create_augroup('infill.lsp', { clear = true })

vim.api.nvim_create_autocmd('VimLeavePre', {
  group = group,
  callback = function()
    M.state.exiting = true
  end,
})

return M
