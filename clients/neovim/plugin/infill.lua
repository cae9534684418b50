-- Commands of infill.nvim; the plugin itself starts only when require("infill").setup{} runs.
if vim.g.loaded_infill then
  return
end
vim.g.loaded_infill = true

local function infill()
  return require('infill')
end

vim.api.nvim_create_user_command('InfillFillGap', function(opts)
  infill().fill_gap(opts)
end, { range = true, desc = 'infill: replace the selection with a generated fill' })

vim.api.nvim_create_user_command('InfillFillAllGaps', function()
  infill().fill_all_gaps()
end, { desc = 'infill: fill every [[...]], {{...}} or ___ placeholder (Markdown)' })

vim.api.nvim_create_user_command('InfillStatus', function()
  infill().show_status()
end, { desc = 'infill: show client and server status' })

vim.api.nvim_create_user_command('InfillToggle', function()
  infill().toggle()
end, { desc = 'infill: turn automatic suggestions on/off' })

vim.api.nvim_create_user_command('InfillRestart', function()
  infill().restart()
end, { desc = 'infill: restart the infill-ls server' })

vim.api.nvim_set_hl(0, 'InfillGhost', { link = 'Comment', default = true })
vim.api.nvim_set_hl(0, 'InfillGhostHint', { link = 'NonText', default = true })
