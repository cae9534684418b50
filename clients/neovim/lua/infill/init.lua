-- infill.nvim: ghost-text suggestions and gap filling from the infill-ls language server.
local actions = require('infill.actions')
local config = require('infill.config')
local ghost = require('infill.ghost')
local lsp = require('infill.lsp')
local suggest = require('infill.suggest')

local api = vim.api
local M = {}

local group = api.nvim_create_augroup('infill', { clear = true })

local function define_highlights()
  api.nvim_set_hl(0, 'InfillGhost', { link = 'Comment', default = true })
  api.nvim_set_hl(0, 'InfillGhostHint', { link = 'NonText', default = true })
end

local fallbacks = {} ---@type table<string, table|false>  lhs -> the user's own mapping we replaced (false: none)
local mapped = {} ---@type string[]  our insert-mode keys, to remove when setup{} runs again

--- What `lhs` did in Insert mode before us: the user's mapping (maparg's dict), or false for the plain key.
local function remember_fallback(lhs)
  local existing = vim.fn.maparg(lhs, 'i', false, true)
  fallbacks[lhs] = not vim.tbl_isempty(existing) and existing or false
end

--- Does what `lhs` did before: runs the user's mapping (callback or rhs, expr or not, remapping as it did), or
--- types the key itself.
local function fall_back(lhs)
  local m = fallbacks[lhs]
  if not m then
    return api.nvim_feedkeys(vim.keycode(lhs), 'ni', false) -- (before any keys typed after it)
  end
  if m.callback and m.expr ~= 1 then
    return m.callback()
  end
  local keys = m.callback and m.callback() or (m.expr == 1 and vim.fn.eval(m.rhs) or m.rhs)
  if type(keys) ~= 'string' or keys == '' then
    return
  end
  if m.expr ~= 1 or m.replace_keycodes == 1 or not m.callback then
    keys = vim.keycode(keys)
  end
  api.nvim_feedkeys(keys, m.noremap == 1 and 'ni' or 'mi', false)
end

local function set_keymaps(keymaps)
  for _, lhs in ipairs(mapped) do
    local now = vim.fn.maparg(lhs, 'i', false, true)
    if (now.desc or ''):find('^infill: ') then -- (a mapping the user made since stays)
      vim.keymap.del('i', lhs)
      if fallbacks[lhs] then
        pcall(vim.fn.mapset, 'i', false, fallbacks[lhs]) -- the user's own mapping back
      end
    end
    fallbacks[lhs] = nil
  end
  mapped = {}
  if keymaps == false then
    return
  end
  local function map(lhs, on_key, desc)
    if not lhs then
      return
    end
    remember_fallback(lhs)
    mapped[#mapped + 1] = lhs
    -- With no suggestion on screen the key does what it did before: the user's mapping, else the key itself.
    vim.keymap.set('i', lhs, function()
      if suggest.is_visible() then
        return M._key(on_key)
      end
      fall_back(lhs)
    end, { desc = 'infill: ' .. desc })
  end
  map(keymaps.accept, 'accept', 'accept suggestion')
  map(keymaps.accept_word, 'accept_word', 'accept next word of suggestion')
  map(keymaps.accept_line, 'accept_line', 'accept next line of suggestion')
  map(keymaps.next, 'next', 'next suggestion')
  map(keymaps.prev, 'prev', 'previous suggestion')
  map(keymaps.dismiss, 'dismiss', 'dismiss suggestion')
  if keymaps.suggest then
    remember_fallback(keymaps.suggest)
    mapped[#mapped + 1] = keymaps.suggest
    vim.keymap.set('i', keymaps.suggest, function()
      M.suggest()
    end, { desc = 'infill: request a suggestion' })
  end
end

local key_actions = {
  accept = function()
    return suggest.accept('all')
  end,
  accept_word = function()
    return suggest.accept('word')
  end,
  accept_line = function()
    return suggest.accept('line')
  end,
  next = function()
    return suggest.cycle(1)
  end,
  prev = function()
    return suggest.cycle(-1)
  end,
  dismiss = function()
    return suggest.dismiss()
  end,
}

function M._key(name)
  key_actions[name]()
end

local function set_autocmds()
  api.nvim_clear_autocmds({ group = group })
  api.nvim_create_autocmd('TextChangedI', { group = group, callback = suggest.on_text_changed })
  api.nvim_create_autocmd('CursorMovedI', {
    group = group,
    callback = function()
      suggest.refresh()
    end,
  })
  api.nvim_create_autocmd('CompleteChanged', {
    group = group,
    callback = function()
      local s = suggest.current()
      if s then
        ghost.clear(s.bufnr)
      end
    end,
  })
  api.nvim_create_autocmd('CompleteDone', {
    group = group,
    callback = vim.schedule_wrap(function()
      suggest.refresh()
    end),
  })
  api.nvim_create_autocmd({ 'BufLeave', 'BufUnload' }, {
    group = group,
    callback = function(args)
      suggest.dismiss()
      lsp.cursor_left(args.buf)
    end,
  })
  -- The cursor on another line in Normal mode (or a buffer entered, or the client just attached): the server warms
  -- the prompt there. Not in Insert mode, where the edit that moved the cursor warms it already.
  api.nvim_create_autocmd({ 'CursorMoved', 'BufEnter', 'LspAttach' }, {
    group = group,
    callback = function(args)
      if args.event ~= 'LspAttach' or args.buf == api.nvim_get_current_buf() then
        lsp.cursor_moved(args.buf)
      end
    end,
  })
  -- Leaving Insert mode by any key (<C-c> fires no InsertLeave); insert-completion modes (ic, ix) stay.
  api.nvim_create_autocmd('ModeChanged', {
    group = group,
    pattern = 'i:*',
    callback = function()
      if not vim.v.event.new_mode:match('^i') then
        suggest.dismiss()
      end
    end,
  })
  api.nvim_create_autocmd('ColorScheme', { group = group, callback = define_highlights })
end

--- Configures and starts the client. See |infill-config|.
---@param opts table|nil
function M.setup(opts)
  config.apply(opts)
  define_highlights()
  set_autocmds()
  set_keymaps(config.current.keymaps)
  lsp.start()
end

--- Requests a suggestion at the cursor now (manual trigger).
function M.suggest()
  suggest.request(true)
end

M.accept = function()
  return suggest.accept('all')
end
M.accept_word = function()
  return suggest.accept('word')
end
M.accept_line = function()
  return suggest.accept('line')
end
M.next = function()
  return suggest.cycle(1)
end
M.prev = function()
  return suggest.cycle(-1)
end
M.dismiss = suggest.dismiss
M.is_visible = suggest.is_visible
M.fill_gap = actions.fill_gap
M.fill_all_gaps = actions.fill_all_gaps
M.restart = lsp.restart

--- Turns automatic suggestions on or off (here and in the server's `enabled` setting).
---@param on boolean|nil  nil flips the current state
function M.toggle(on)
  if on == nil then
    on = not suggest.enabled
  end
  suggest.enabled = on
  config.current.settings.enabled = on
  if not on then
    suggest.dismiss()
  end
  lsp.push_settings()
  vim.notify('infill: suggestions ' .. (on and 'on' or 'off'))
end

--- Changes server settings at run time (sent with workspace/didChangeConfiguration).
function M.update_settings(settings)
  config.current.settings = vim.tbl_deep_extend('force', config.current.settings, settings)
  lsp.push_settings()
end

--- A short status for statuslines: "infill: ready", "infill: loading", ...
function M.statusline()
  local st = lsp.state
  if st.start_error or st.gave_up then
    return 'infill: error'
  end
  if st.status then
    return 'infill: ' .. (st.status.label or st.status.state or '?')
  end
  return lsp.get_client(api.nvim_get_current_buf()) and 'infill: starting' or ''
end

--- Everything :InfillStatus shows, as a table.
function M.status_info(bufnr)
  bufnr = bufnr or api.nvim_get_current_buf()
  local client = lsp.get_client(bufnr)
  return {
    command = config.command(),
    attached = client ~= nil,
    client_id = client and client.id,
    skipped = vim.b[bufnr].infill_skipped,
    start_error = lsp.state.start_error,
    gave_up = lsp.state.gave_up,
    crashes = lsp.state.crashes,
    last_exit = lsp.state.last_exit,
    suggestions = suggest.enabled,
    last_error = suggest.last_error,
    stats = suggest.stats,
    server = lsp.state.status,
  }
end

--- :InfillStatus: client state plus the server's `infill.status` answer.
function M.show_status()
  local bufnr = api.nvim_get_current_buf()
  local info = M.status_info(bufnr)
  local client = lsp.get_client(bufnr)
  if not client then
    vim.notify('infill status\n' .. vim.inspect(info))
    return
  end
  client:exec_cmd({ title = 'status', command = 'infill.status', arguments = {} }, { bufnr = bufnr }, function(err, result)
    info.server = err and ('infill.status failed: ' .. (err.message or '?')) or result
    vim.notify('infill status\n' .. vim.inspect(info))
  end)
end

return M
