-- "Fill gap" on a selection and "Fill all gaps" in Markdown, through the server's code actions.
local lsp = require('infill.lsp')

local api = vim.api
local M = {}

local MARKDOWN = { markdown = true, ['markdown.mdx'] = true, rmd = true, quarto = true }

local function say(msg, level)
  vim.notify('infill: ' .. msg, level or vim.log.levels.INFO)
end

--- The document version an edit was computed for (nil when it carries none).
local function edit_versions(edit)
  local versions = {}
  for _, change in ipairs(edit.documentChanges or {}) do
    if change.textDocument then
      versions[#versions + 1] = change.textDocument
    end
  end
  return versions
end

--- Applies `edit` only if `bufnr` is exactly as it was when the action was asked for.
local function apply_if_current(client, bufnr, tick, edit)
  if not api.nvim_buf_is_valid(bufnr) then
    return say('the buffer was closed; edit dropped', vim.log.levels.WARN)
  end
  if api.nvim_buf_get_changedtick(bufnr) ~= tick then
    return say('the buffer changed while the gap was being filled; edit dropped (run it again)', vim.log.levels.WARN)
  end
  local uri = vim.uri_from_bufnr(bufnr)
  for _, doc in ipairs(edit_versions(edit)) do
    if doc.uri == uri and doc.version ~= vim.NIL and doc.version ~= nil and doc.version ~= vim.lsp.util.buf_versions[bufnr] then
      return say(('edit is for version %s, buffer is at %s; dropped'):format(doc.version, vim.lsp.util.buf_versions[bufnr]), vim.log.levels.WARN)
    end
  end
  vim.lsp.util.apply_workspace_edit(edit, client.offset_encoding)
  return true
end

local function run_action(client, bufnr, tick, action, done)
  if action.edit then
    apply_if_current(client, bufnr, tick, action.edit)
    return done()
  end
  if action.command then
    local cmd = type(action.command) == 'table' and action.command or action
    client:exec_cmd(cmd, { bufnr = bufnr }, function()
      done()
    end)
    return
  end
  say('the code action carried neither an edit nor a command', vim.log.levels.WARN)
  done()
end

local function resolve_and_run(client, bufnr, tick, action, done)
  local resolvable = vim.tbl_get(client.server_capabilities, 'codeActionProvider', 'resolveProvider')
  if action.edit or not resolvable then
    return run_action(client, bufnr, tick, action, done)
  end
  client:request('codeAction/resolve', action, function(err, resolved)
    if err then
      say('resolving the action failed: ' .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return done()
    end
    run_action(client, bufnr, tick, resolved or action, done)
  end, bufnr)
end

local function line_text(bufnr, row)
  return api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ''
end

--- LSP position of a 0-based (row, byte col) in the client's encoding.
local function lsp_position(bufnr, row, col, encoding)
  local line = line_text(bufnr, row)
  col = math.max(0, math.min(col, #line))
  return { line = row, character = vim.str_utfindex(line, encoding, col, false) }
end

--- Requests code actions over a byte range and runs the first whose title matches `pattern`.
---@param opts {bufnr: integer, range: integer[], pattern: string, label: string, on_done: fun()|nil}
function M.run_matching(opts)
  local bufnr = opts.bufnr
  local client = lsp.get_client(bufnr)
  local done = opts.on_done or function() end
  if not client then
    say(vim.b[bufnr].infill_skipped or 'infill-ls is not attached to this buffer (:InfillStatus)', vim.log.levels.WARN)
    return done()
  end
  local enc = client.offset_encoding
  local r = opts.range
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    range = { start = lsp_position(bufnr, r[1], r[2], enc), ['end'] = lsp_position(bufnr, r[3], r[4], enc) },
    context = { diagnostics = {}, only = { 'refactor.rewrite' }, triggerKind = 1 },
  }
  local tick = api.nvim_buf_get_changedtick(bufnr)
  say(opts.label .. '…')
  client:request('textDocument/codeAction', params, function(err, actions)
    if err then
      say('code action request failed: ' .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return done()
    end
    for _, action in ipairs(actions or {}) do
      if type(action.title) == 'string' and action.title:lower():find(opts.pattern) then
        return resolve_and_run(client, bufnr, tick, action, done)
      end
    end
    say('the server offered no "' .. opts.label .. '" action here', vim.log.levels.WARN)
    done()
  end, bufnr)
end

--- The last visual selection as a 0-based byte range with an exclusive end.
local function visual_range(bufnr)
  local s, e = api.nvim_buf_get_mark(bufnr, '<'), api.nvim_buf_get_mark(bufnr, '>')
  local srow, scol, erow, ecol = s[1] - 1, s[2], e[1] - 1, e[2]
  local last = line_text(bufnr, erow)
  if vim.fn.visualmode() == 'V' then
    return { srow, 0, erow, #last }
  end
  if ecol >= #last then
    return { srow, scol, erow, #last }
  end
  return { srow, scol, erow, ecol + 1 + vim.str_utf_end(last, ecol + 1) }
end

--- :InfillFillGap on the last visual selection (or a line range): replace it with a generated fill.
function M.fill_gap(cmd_opts)
  local bufnr = api.nvim_get_current_buf()
  local range
  if cmd_opts and cmd_opts.range and cmd_opts.range > 0 then
    local s, e = api.nvim_buf_get_mark(bufnr, '<'), api.nvim_buf_get_mark(bufnr, '>')
    if s[1] == cmd_opts.line1 and e[1] == cmd_opts.line2 then
      range = visual_range(bufnr)
    else
      range = { cmd_opts.line1 - 1, 0, cmd_opts.line2 - 1, #line_text(bufnr, cmd_opts.line2 - 1) }
    end
  else
    return say('select the gap first (visual mode), then :InfillFillGap', vim.log.levels.WARN)
  end
  M.run_matching({ bufnr = bufnr, range = range, pattern = '^fill gap', label = 'Fill gap', on_done = cmd_opts.on_done })
end

--- :InfillFillAllGaps: fill every placeholder ([[...]], {{...}}, ___) of a Markdown buffer.
function M.fill_all_gaps(on_done)
  local bufnr = api.nvim_get_current_buf()
  if not MARKDOWN[vim.bo[bufnr].filetype] then
    return say('Fill all gaps works in Markdown buffers only', vim.log.levels.WARN)
  end
  local last = api.nvim_buf_line_count(bufnr) - 1
  M.run_matching({
    bufnr = bufnr,
    range = { 0, 0, last, #line_text(bufnr, last) },
    pattern = '^fill all gaps',
    label = 'Fill all gaps',
    on_done = on_done,
  })
end

return M
