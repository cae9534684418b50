-- Options of the infill.nvim client: defaults, merging with the user's table, validation.
local M = {}

---@class infill.Keymaps
---@field accept string|false
---@field accept_word string|false
---@field accept_line string|false
---@field dismiss string|false
---@field next string|false
---@field prev string|false
---@field suggest string|false

---@class infill.Config
---@field cmd string[]               command that starts the server
---@field args string[]              extra arguments appended to cmd (e.g. {"--model", "/path"})
---@field filetypes string[]|nil     nil: every filetype
---@field settings table             server settings (initializationOptions and section "infill")
---@field auto_trigger boolean       request suggestions while typing
---@field max_buffer_bytes integer   larger buffers get no automatic suggestions
---@field restart_max integer        restarts after crashes before giving up
---@field restart_base_ms integer    first restart delay; doubles on each crash
---@field restart_stable_ms integer  a server up this long before it exits starts the crash count afresh
---@field keymaps infill.Keymaps|false  false: no keys at all (map require('infill').accept etc. yourself)
---@field telemetry boolean          send didShowCompletion / didPartiallyAcceptCompletion notifications
M.defaults = {
  cmd = { 'infill-ls', '--stdio' },
  args = {},
  filetypes = nil,
  settings = {},
  auto_trigger = true,
  max_buffer_bytes = 1024 * 1024,
  restart_max = 5,
  restart_base_ms = 500,
  restart_stable_ms = 30000,
  keymaps = {
    accept = '<Tab>',
    accept_word = '<M-Right>',
    accept_line = '<M-C-Right>',
    dismiss = '<C-]>',
    next = '<M-]>',
    prev = '<M-[>',
    suggest = '<M-\\>',
  },
  telemetry = true,
}

---@type infill.Config
M.current = vim.deepcopy(M.defaults)

local function check_keymaps(keymaps)
  if keymaps == false then
    return
  end
  if type(keymaps) ~= 'table' then
    error('infill: keymaps must be a table or false')
  end
  for name, lhs in pairs(keymaps) do
    if M.defaults.keymaps[name] == nil then
      error(('infill: unknown keymap %q'):format(name))
    end
    if lhs ~= false and type(lhs) ~= 'string' then
      error(('infill: keymaps.%s must be a string or false'):format(name))
    end
  end
end

---@param cfg infill.Config
local function validate(cfg)
  vim.validate('cmd', cfg.cmd, 'table')
  if #cfg.cmd == 0 or type(cfg.cmd[1]) ~= 'string' then
    error('infill: cmd must be a non-empty list of strings, e.g. {"infill-ls", "--stdio"}')
  end
  vim.validate('args', cfg.args, 'table')
  vim.validate('filetypes', cfg.filetypes, 'table', true)
  vim.validate('settings', cfg.settings, 'table')
  vim.validate('auto_trigger', cfg.auto_trigger, 'boolean')
  vim.validate('telemetry', cfg.telemetry, 'boolean')
  local numbers = { 'max_buffer_bytes', 'restart_max', 'restart_base_ms', 'restart_stable_ms' }
  for _, key in ipairs(numbers) do
    vim.validate(key, cfg[key], 'number')
    if cfg[key] < 0 then
      error(('infill: %s must be >= 0'):format(key))
    end
  end
  check_keymaps(cfg.keymaps)
end

--- Merges `opts` over the defaults, validates, and makes the result current.
---@param opts table|nil
---@return infill.Config
function M.apply(opts)
  if opts and opts.debounce_ms ~= nil then
    -- The server debounces (its debounceMs setting): one debounce, not two.
    vim.notify('infill: debounce_ms is gone; set settings = { debounceMs = ... } instead', vim.log.levels.WARN)
    opts = vim.deepcopy(opts)
    opts.debounce_ms = nil
  end
  local cfg = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts or {})
  if opts and opts.cmd then
    cfg.cmd = vim.deepcopy(opts.cmd) -- lists replace, never merge index by index
  end
  if opts and opts.keymaps == false then
    cfg.keymaps = false
  end
  if opts and opts.args then
    cfg.args = vim.deepcopy(opts.args)
  end
  validate(cfg)
  M.current = cfg
  return cfg
end

--- The full server command line: cmd followed by args.
---@return string[]
function M.command()
  local full = vim.list_extend(vim.deepcopy(M.current.cmd), M.current.args)
  return full
end

return M
