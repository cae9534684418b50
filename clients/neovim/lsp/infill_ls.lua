-- infill-ls for Neovim's built-in LSP client (0.11+), without the infill.nvim plugin:
--   vim.lsp.enable('infill_ls')
-- Neovim finds this file as lsp/infill_ls.lua on the runtimepath: it comes with infill.nvim (clients/neovim), or
-- copy it to ~/.config/nvim/lsp/. Change any field with vim.lsp.config('infill_ls', { ... }) before enabling,
-- e.g. cmd = { '/path/to/.venv/bin/infill-ls', '--stdio', '--model', '/models/diffusiongemma' }.
-- On 0.12, vim.lsp.inline_completion.enable() then shows the server's suggestions (docs/clients.md).
---@type vim.lsp.Config
return {
  cmd = { 'infill-ls', '--stdio' },
  -- The languages the server knows the grammar or the prose of; it serves any other text too (add them here).
  filetypes = {
    'python', 'javascript', 'javascriptreact', 'typescript', 'typescriptreact', 'go', 'rust', 'json', 'jsonc',
    'markdown', 'text', 'lua', 'c', 'cpp', 'java', 'sh',
  },
  root_markers = { '.git' }, -- no marker: the server still starts, for the file alone
  -- Settings (docs/server.md): the same object as initializationOptions and as workspace/configuration "infill",
  -- e.g. model, device, inlineBudgetMs, debounceMs, maxMiddleTokens, remoteEndpoint.
  init_options = { enabled = true },
  settings = { infill = { enabled = true } },
}
