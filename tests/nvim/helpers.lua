-- Helpers loaded into the Neovim under test (dofile), used by tests/clients/test_neovim.py through the driver.
local T = {}

--- The ghost text drawn in the current buffer: {text, row, col}, or nil.
function T.ghost()
  local text, row, col = require('infill.ghost').read(0)
  if text then
    return { text, row, col }
  end
end

--- The ghost text when it differs from `old` (nil while it is still `old`).
function T.ghost_changed(old)
  local g = T.ghost()
  if g and g[1] ~= old then
    return g
  end
end

function T.extmarks()
  return #vim.api.nvim_buf_get_extmarks(0, require('infill.ghost').ns, 0, -1, {})
end

function T.no_ghost()
  return T.extmarks() == 0 or nil
end

--- The server's infill.status answer (synchronous request).
function T.server_status()
  local client = require('infill.lsp').get_client(0)
  local reply = client:request_sync('workspace/executeCommand', { command = 'infill.status', arguments = {} }, 10000, 0)
  return reply and reply.result
end

--- Server telemetry once `field` exceeds `count`.
function T.telemetry_above(field, count)
  local status = T.server_status()
  if status and status.telemetry[field] > count then
    return status.telemetry
  end
end

--- Line `row` (1-based) once it differs from `old`.
function T.line_changed(row, old)
  local line = vim.api.nvim_buf_get_lines(0, row - 1, row, false)[1]
  if line ~= old then
    return line
  end
end

--- True once no request of the infill client is in flight.
function T.idle()
  local client = require('infill.lsp').get_client(0)
  return client == nil or next(client.requests) == nil
end


--- The whole buffer text once it differs from `old`.
function T.text_changed(old)
  local text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
  if text ~= old then
    return text
  end
end

--- Records every WorkspaceEdit the plugin applies (then applies it as usual) into T.edits.
T.edits = {}
local apply = vim.lsp.util.apply_workspace_edit
vim.lsp.util.apply_workspace_edit = function(edit, encoding)
  table.insert(T.edits, vim.deepcopy(edit))
  return apply(edit, encoding)
end

_G.T = T
return T
