-- Drawing and erasing ghost text with extmarks: the first line inline at the cursor, the rest as virtual lines.
local M = {}

M.ns = vim.api.nvim_create_namespace('infill.ghost')

function M.clear(bufnr)
  if bufnr and vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
end

--- Draws `text` as ghost text at (row, col), 0-based byte position.
---@param bufnr integer
---@param row integer
---@param col integer
---@param text string
---@param hint string|nil  shown dimmed after the first line, e.g. "(1/3)"
function M.show(bufnr, row, col, text, hint)
  M.clear(bufnr)
  local lines = vim.split(text, '\n', { plain = true })
  local opts = { hl_mode = 'combine', priority = 4096, right_gravity = false }
  local first = {}
  if lines[1] ~= '' then
    first[#first + 1] = { lines[1], 'InfillGhost' }
  end
  if hint and #lines == 1 then
    first[#first + 1] = { ' ' .. hint, 'InfillGhostHint' }
  end
  if #first > 0 then
    opts.virt_text = first
    opts.virt_text_pos = 'inline'
  end
  if #lines > 1 then
    local virt_lines = {}
    for i = 2, #lines do
      local chunk = { { lines[i], 'InfillGhost' } }
      if hint and i == #lines then
        chunk[#chunk + 1] = { ' ' .. hint, 'InfillGhostHint' }
      end
      virt_lines[#virt_lines + 1] = chunk
    end
    opts.virt_lines = virt_lines
  end
  return vim.api.nvim_buf_set_extmark(bufnr, M.ns, row, col, opts)
end

--- The ghost text currently drawn in `bufnr` (joined lines), or nil. Used by tests and :InfillStatus.
function M.read(bufnr)
  local marks = vim.api.nvim_buf_get_extmarks(bufnr, M.ns, 0, -1, { details = true })
  if #marks == 0 then
    return nil
  end
  local details = marks[1][4]
  local parts = {}
  for _, chunk in ipairs(details.virt_text or {}) do
    if chunk[2] == 'InfillGhost' then
      parts[#parts + 1] = chunk[1]
    end
  end
  local text = table.concat(parts)
  for _, line in ipairs(details.virt_lines or {}) do
    local pieces = {}
    for _, chunk in ipairs(line) do
      if chunk[2] == 'InfillGhost' then
        pieces[#pieces + 1] = chunk[1]
      end
    end
    text = text .. '\n' .. table.concat(pieces)
  end
  return text, marks[1][2], marks[1][3]
end

return M
