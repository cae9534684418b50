-- :checkhealth infill
local M = {}

function M.check()
  local health = vim.health
  health.start('infill: Neovim')
  if vim.fn.has('nvim-0.11') == 1 then
    health.ok('Neovim ' .. tostring(vim.version()))
  else
    health.error('Neovim 0.11 or newer is required (vim.lsp.config / vim.lsp.enable)')
  end

  health.start('infill: server')
  local config = require('infill.config')
  local lsp = require('infill.lsp')
  local cmd = config.command()
  if vim.fn.executable(cmd[1]) == 1 then
    health.ok(('server command: %s (%s)'):format(table.concat(cmd, ' '), vim.fn.exepath(cmd[1])))
  else
    health.error(('server command %q is not executable'):format(cmd[1]), {
      'pip install infill-ls (puts infill-ls on PATH), or',
      'require("infill").setup{ cmd = { "/path/to/python", "-m", "server.cli", "--stdio" } }',
    })
  end
  if not lsp.state.enabled then
    health.warn('require("infill").setup{} has not started the client' .. (lsp.state.start_error and (': ' .. lsp.state.start_error) or ''))
  end
  if lsp.state.gave_up then
    health.error('the server crashed repeatedly (' .. tostring(lsp.state.last_exit) .. '); run :InfillRestart after fixing it')
  end
  local clients = vim.lsp.get_clients({ name = lsp.name })
  if #clients == 0 then
    health.info('no infill-ls client running (open a file after setup)')
  end
  for _, client in ipairs(clients) do
    local caps = client.server_capabilities or {}
    health.ok(('client %d running, encoding %s, attached to %d buffer(s)'):format(
      client.id,
      client.offset_encoding,
      vim.tbl_count(client.attached_buffers)
    ))
    if caps.inlineCompletionProvider then
      health.ok('server offers inline completions')
    else
      health.warn('server does not advertise inlineCompletionProvider')
    end
  end
  local status = lsp.state.status
  if status then
    local line = ('state %s, backend %s, model %s, device %s'):format(
      tostring(status.state),
      tostring(status.backend),
      tostring(status.model),
      tostring(status.device)
    )
    if status.state == 'error' then
      health.error(line .. ': ' .. tostring(status.error))
    elseif status.isFallback then
      health.warn(line .. ' (offline fallback)')
    else
      health.ok(line)
    end
  end

  health.start('infill: highlights')
  local hl = vim.api.nvim_get_hl(0, { name = 'InfillGhost' })
  if next(hl) then
    health.ok('InfillGhost is defined' .. (hl.link and (' (links to ' .. hl.link .. ')') or ''))
  else
    health.warn('InfillGhost highlight group is not defined')
  end
end

return M
