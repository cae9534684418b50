-- Inline suggestions: requests (the server debounces them), response checks, ghost text, typing through, cycling,
-- accepting, and the telemetry notifications in Copilot's shape.
local config = require('infill.config')
local ghost = require('infill.ghost')
local lsp = require('infill.lsp')
local util = require('infill.util')

local api = vim.api
local M = {}

local TRIGGER_INVOKED, TRIGGER_AUTOMATIC = 1, 2
local CANCELLED, CONTENT_MODIFIED = -32800, -32801

M.enabled = true
M.last_error = nil ---@type string|nil
M.stats = { requests = 0, shown = 0, stale = 0, accepted = 0 }

---@class infill.Item
---@field text string         what to insert at the anchor
---@field raw table           the item as the server sent it (telemetry sends it back)
---@field insert string        its insertText
---@field replace_col integer|nil  end column (anchor row) of text after the cursor the item replaces
---@field command table|nil
---@field id any

---@class infill.Suggestion
---@field bufnr integer
---@field client_id integer
---@field row integer   anchor: the cursor when the request was made (0-based row, byte col)
---@field col integer
---@field items infill.Item[]
---@field index integer
---@field shown table<integer, boolean>
---@field accepted boolean
local current = nil ---@type infill.Suggestion|nil
local pending = nil ---@type {bufnr: integer, client: vim.lsp.Client, id: integer}|nil

local function in_insert_mode()
  return api.nvim_get_mode().mode:sub(1, 1) == 'i'
end

local function cursor()
  local pos = api.nvim_win_get_cursor(0)
  return pos[1] - 1, pos[2]
end

local function telemetry(client_id, method, params)
  local client = vim.lsp.get_client_by_id(client_id)
  if client then
    lsp.telemetry(client, method, params)
  end
end

function M.cancel_pending()
  if pending then
    pcall(pending.client.cancel_request, pending.client, pending.id)
    pending = nil
  end
end

--- Forgets the suggestion (the server infers a rejection from the edits that follow: there is no notification).
function M.clear()
  local s = current
  current = nil
  if s then
    ghost.clear(s.bufnr)
  end
end

--- The item still matching what was typed since the request, and the part of it not yet typed.
---@return infill.Item|nil, string|nil
local function live_item()
  local s = current
  if not s or s.bufnr ~= api.nvim_get_current_buf() or not api.nvim_buf_is_valid(s.bufnr) then
    return nil
  end
  local row, col = cursor()
  local typed = util.text_between(s.bufnr, s.row, s.col, row, col)
  if not typed then
    return nil
  end
  local order = { s.index }
  for i = 1, #s.items do
    if i ~= s.index then
      order[#order + 1] = i
    end
  end
  for _, i in ipairs(order) do
    local item = s.items[i]
    if #item.text > #typed and item.text:sub(1, #typed) == typed then
      s.index = i
      return item, item.text:sub(#typed + 1)
    end
  end
  return nil
end

--- Redraws the ghost text for the cursor, or clears the suggestion when it no longer matches.
---@return boolean visible
function M.refresh()
  local s = current
  if not s then
    return false
  end
  local item, rest = live_item()
  if not item or not rest then
    M.clear()
    return false
  end
  if vim.fn.pumvisible() == 1 then
    ghost.clear(s.bufnr) -- hidden, not forgotten: redrawn when the menu closes
    return false
  end
  local row, col = cursor()
  local hint = #s.items > 1 and ('(%d/%d)'):format(s.index, #s.items) or nil
  ghost.show(s.bufnr, row, col, rest, hint)
  if not s.shown[s.index] then
    s.shown[s.index] = true
    M.stats.shown = M.stats.shown + 1
    telemetry(s.client_id, 'textDocument/didShowCompletion', { item = item.raw })
  end
  return true
end

function M.is_visible()
  return current ~= nil and live_item() ~= nil and vim.fn.pumvisible() == 0
end

--- Converts protocol items into texts to insert at the anchor; drops items that do not fit the buffer.
local function parse_items(result, bufnr, row, col, encoding)
  local raw = result and (result.items or result) or {}
  local items = {}
  for _, it in ipairs(raw) do
    local insert = it.insertText
    if type(insert) == 'table' then
      insert = util.snippet_to_text(insert.value or '')
    end
    if type(insert) == 'string' and insert ~= '' then
      local text, replace_col = insert, nil
      if it.range then
        local srow, erow = it.range.start.line, it.range['end'].line
        local scol = util.byte_col(bufnr, srow, it.range.start.character, encoding)
        local ecol = util.byte_col(bufnr, erow, it.range['end'].character, encoding)
        local before = util.text_between(bufnr, srow, scol, row, col)
        if before and insert:sub(1, #before) == before then
          text = insert:sub(#before + 1)
          if erow == row and ecol > col then
            replace_col = ecol
          end
        else
          text = nil -- the range does not start at or before the cursor with matching text
        end
      end
      if text and text ~= '' then
        local id = it.itemId or (type(it.data) == 'table' and it.data.itemId) or #items + 1
        items[#items + 1] = { text = text, raw = it, insert = insert, replace_col = replace_col, command = it.command, id = id }
      end
    end
  end
  return items
end

local function on_response(req, err, result)
  if not pending or pending.id ~= req.id then
    return -- superseded by a newer request
  end
  pending = nil
  if err then
    if err.code ~= CANCELLED and err.code ~= CONTENT_MODIFIED then
      M.last_error = err.message or vim.inspect(err)
      if req.invoked then
        vim.notify('infill: ' .. M.last_error, vim.log.levels.WARN)
      end
    end
    return
  end
  local bufnr = req.bufnr
  local row, col = cursor()
  local stale = not api.nvim_buf_is_valid(bufnr)
    or api.nvim_get_current_buf() ~= bufnr
    or not in_insert_mode()
    or api.nvim_buf_get_changedtick(bufnr) ~= req.tick
    or vim.lsp.util.buf_versions[bufnr] ~= req.version
    or row ~= req.row
    or col ~= req.col
  if stale then
    M.stats.stale = M.stats.stale + 1
    return
  end
  local items = parse_items(result, bufnr, row, col, req.client.offset_encoding)
  if #items == 0 then
    if req.invoked then
      vim.notify('infill: no suggestion here', vim.log.levels.INFO)
    end
    return
  end
  M.clear()
  current = {
    bufnr = bufnr,
    client_id = req.client.id,
    row = row,
    col = col,
    items = items,
    index = 1,
    shown = {},
    accepted = false,
  }
  M.refresh()
end

--- Asks the server for suggestions at the cursor of the current buffer.
---@param invoked boolean  true for a manual request (reports problems), false for automatic ones
function M.request(invoked)
  M.cancel_pending()
  local bufnr = api.nvim_get_current_buf()
  local function skip(why)
    if invoked then
      vim.notify('infill: ' .. why, vim.log.levels.WARN)
    end
  end
  local client = lsp.get_client(bufnr)
  if not client then
    return skip(vim.b[bufnr].infill_skipped or 'infill-ls is not attached to this buffer (:InfillStatus)')
  end
  if not client.server_capabilities.inlineCompletionProvider then
    return skip('the server does not offer inline completions')
  end
  if util.byte_size(bufnr) > config.current.max_buffer_bytes then
    return skip('buffer is larger than max_buffer_bytes')
  end
  local row, col = cursor()
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = invoked and TRIGGER_INVOKED or TRIGGER_AUTOMATIC }
  local req = {
    bufnr = bufnr,
    client = client,
    invoked = invoked,
    row = row,
    col = col,
    tick = api.nvim_buf_get_changedtick(bufnr),
  }
  local ok, id = client:request('textDocument/inlineCompletion', params, function(err, result)
    on_response(req, err, result)
  end, bufnr)
  -- request() flushes pending didChange first, so the document version is read afterwards
  req.version = vim.lsp.util.buf_versions[bufnr]
  if ok and id then
    req.id = id
    pending = { bufnr = bufnr, client = client, id = id }
    M.stats.requests = M.stats.requests + 1
  end
end

--- After a text change in Insert mode: keep a suggestion that still matches, else request a new one (at once:
--- the server debounces automatic requests, and a newer request supersedes the older one there).
function M.on_text_changed()
  if M.refresh() then
    return
  end
  if M.enabled and config.current.auto_trigger and in_insert_mode() and vim.fn.pumvisible() == 0 then
    M.request(false)
  end
end

local function insert_at_cursor(bufnr, text, replace_to_col)
  local row, col = cursor()
  local lines = vim.split(text, '\n', { plain = true })
  api.nvim_buf_set_text(bufnr, row, col, row, replace_to_col or col, lines)
  local end_row = row + #lines - 1
  local end_col = (#lines == 1 and col or 0) + #lines[#lines]
  api.nvim_win_set_cursor(0, { end_row + 1, end_col })
end

--- Accepts all of the suggestion, its next word or the rest of its line.
---@param how 'all'|'word'|'line'
---@return boolean accepted
function M.accept(how)
  local s = current
  local item, rest = live_item()
  if not s or not item or not rest then
    return false
  end
  local piece = how == 'word' and util.first_word(rest) or how == 'line' and util.first_line(rest) or rest
  local full = #piece >= #rest
  local replace_to = nil
  local row, col = cursor()
  if full and item.replace_col and row == s.row then
    replace_to = item.replace_col + (col - s.col)
  end
  ghost.clear(s.bufnr)
  insert_at_cursor(s.bufnr, piece, replace_to)
  M.stats.accepted = M.stats.accepted + 1
  if full then
    s.accepted = true
    M.clear()
    local client = vim.lsp.get_client_by_id(s.client_id)
    if item.command and client then
      client:exec_cmd(item.command, { bufnr = s.bufnr })
    end
  else
    -- UTF-16 units of the item's own text accepted so far (its insertText may begin before the cursor).
    local bytes = #item.insert - #item.text + (#item.text - #rest) + #piece
    local length = vim.str_utfindex(item.insert, 'utf-16', bytes, false)
    telemetry(s.client_id, 'textDocument/didPartiallyAcceptCompletion', { item = item.raw, acceptedLength = length })
    M.refresh()
  end
  return true
end

--- Shows the next (+1) or previous (-1) item.
function M.cycle(step)
  local s = current
  if not s or #s.items < 2 or not live_item() then
    return false
  end
  local n = #s.items
  for k = 1, n - 1 do
    local i = ((s.index - 1 + step * k) % n) + 1
    local saved = s.index
    s.index = i
    local item = live_item()
    if item and s.index == i then
      M.refresh()
      return true
    end
    s.index = saved
  end
  return false
end

--- Drops the suggestion and any request in flight.
function M.dismiss()
  local had = current ~= nil
  M.cancel_pending()
  M.clear()
  return had
end

function M.current()
  return current
end

return M
