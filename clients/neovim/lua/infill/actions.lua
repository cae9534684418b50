-- "Fill gap" on a selection and "Fill all gaps" in Markdown: the server's code actions, run by Neovim's own
-- vim.lsp.buf.code_action (which resolves them and applies their edit only to the document version it was
-- computed for).
local lsp = require('infill.lsp')

local api = vim.api
local M = {}

local MARKDOWN = { markdown = true, ['markdown.mdx'] = true, rmd = true, quarto = true }
local DONE_AFTER = { ['codeAction/resolve'] = true, ['workspace/executeCommand'] = true }

local function say(msg, level)
  vim.notify('infill: ' .. msg, level or vim.log.levels.INFO)
end

--- Calls `done` once the action chosen by vim.lsp.buf.code_action has been applied (or none was): after the
--- reply to its codeAction request when nothing was chosen or the action carried its edit, else after the reply
--- to the request it then made (resolve, or the command). Replies are handled in order, so `done` is scheduled
--- behind the handler that applies the edit.
local function when_applied(client, bufnr, chosen, done)
  local id
  id = api.nvim_create_autocmd('LspRequest', {
    buffer = bufnr,
    callback = function(ev)
      local request = ev.data.request
      if ev.data.client_id ~= client.id or request.type ~= 'complete' then
        return
      end
      if request.method == 'textDocument/codeAction' then
        vim.schedule(function() -- behind the handler that chose (and maybe applied) the action
          if not chosen() or chosen().edit then
            pcall(api.nvim_del_autocmd, id)
            done()
          end
        end)
      elseif DONE_AFTER[request.method] then
        pcall(api.nvim_del_autocmd, id)
        vim.schedule(done)
      end
    end,
  })
end

--- Asks for code actions over a range (mark-like: {row, col} 1-based rows, inclusive end) and applies the first
--- whose title matches `pattern`, through vim.lsp.buf.code_action{filter=..., apply=true}.
---@param opts {bufnr: integer, range: table, pattern: string, label: string, on_done: fun()|nil}
function M.run_matching(opts)
  local bufnr = opts.bufnr
  local client = lsp.get_client(bufnr)
  local done = opts.on_done or function() end
  if not client then
    say(vim.b[bufnr].infill_skipped or 'infill-ls is not attached to this buffer (:InfillStatus)', vim.log.levels.WARN)
    return done()
  end
  local chosen = nil
  when_applied(client, bufnr, function()
    return chosen
  end, done)
  say(opts.label .. '…')
  vim.lsp.buf.code_action({
    range = opts.range,
    context = { diagnostics = {}, only = { 'refactor.rewrite' }, triggerKind = 1 },
    apply = true,
    filter = function(action, client_id)
      local ours = (client_id == nil or client_id == client.id) and chosen == nil
        and type(action.title) == 'string' and action.title:lower():find(opts.pattern) ~= nil
      if ours then
        chosen = action
      end
      return ours
    end,
  })
end

local function line_text(bufnr, row)
  return api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ''
end

--- The last character's start byte of `line` up to byte `col` (exclusive): a mark's column.
local function last_char_start(line, col)
  if col <= 0 then
    return 0
  end
  return col - 1 + vim.str_utf_start(line, col)
end

--- :InfillFillGap on the last visual selection (or a line range): replace it with a generated fill.
function M.fill_gap(cmd_opts)
  local bufnr = api.nvim_get_current_buf()
  if not (cmd_opts and cmd_opts.range and cmd_opts.range > 0) then
    return say('select the gap first (visual mode), then :InfillFillGap', vim.log.levels.WARN)
  end
  local s, e = api.nvim_buf_get_mark(bufnr, '<'), api.nvim_buf_get_mark(bufnr, '>')
  local range
  if s[1] == cmd_opts.line1 and e[1] == cmd_opts.line2 and vim.fn.visualmode() ~= 'V' then
    local last = line_text(bufnr, e[1] - 1) -- ('> is on the last character's first byte; past the end after $)
    range = { start = s, ['end'] = { e[1], math.min(e[2], last_char_start(last, #last)) } }
  else
    local last = line_text(bufnr, cmd_opts.line2 - 1)
    range = { start = { cmd_opts.line1, 0 }, ['end'] = { cmd_opts.line2, last_char_start(last, #last) } }
  end
  M.run_matching({ bufnr = bufnr, range = range, pattern = '^fill gap', label = 'Fill gap', on_done = cmd_opts.on_done })
end

--- :InfillFillAllGaps: fill every placeholder ([[...]], {{...}}, ___) of a Markdown buffer.
function M.fill_all_gaps(on_done)
  local bufnr = api.nvim_get_current_buf()
  if not MARKDOWN[vim.bo[bufnr].filetype] then
    return say('Fill all gaps works in Markdown buffers only', vim.log.levels.WARN)
  end
  local rows = api.nvim_buf_line_count(bufnr)
  local last = line_text(bufnr, rows - 1)
  M.run_matching({
    bufnr = bufnr,
    range = { start = { 1, 0 }, ['end'] = { rows, last_char_start(last, #last) } },
    pattern = '^fill all gaps',
    label = 'Fill all gaps',
    on_done = on_done,
  })
end

return M
