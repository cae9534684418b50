-- Small text and buffer helpers shared by the suggestion and code-action code.
local M = {}

--- Whether `text` is valid UTF-8: every high byte starts a well-formed sequence, read left to right.
--- (Overlong forms and surrogates are not singled out.)
---@param text string
---@return boolean
function M.is_utf8_text(text)
  local i = text:find('[\128-\255]')
  while i do
    local c = text:byte(i)
    local len = (c >= 194 and c <= 223) and 2 or (c >= 224 and c <= 239) and 3 or (c >= 240 and c <= 244) and 4 or 0
    if len == 0 then
      return false
    end
    for k = 1, len - 1 do
      local b = text:byte(i + k)
      if not b or b < 128 or b > 191 then
        return false
      end
    end
    i = text:find('[\128-\255]', i + len)
  end
  return true
end

---@param bufnr integer
---@return boolean
function M.is_utf8(bufnr)
  return M.is_utf8_text(table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false), '\n'))
end

--- Buffer size in bytes, cheap for any size.
function M.byte_size(bufnr)
  return vim.api.nvim_buf_get_offset(bufnr, vim.api.nvim_buf_line_count(bufnr))
end

--- Whether infill should serve this buffer, and why not.
---@return boolean, string|nil
function M.buffer_eligible(bufnr, max_bytes)
  if not vim.api.nvim_buf_is_valid(bufnr) then
    return false, 'buffer is gone'
  end
  if vim.bo[bufnr].buftype ~= '' then
    return false, 'not a file buffer'
  end
  if vim.api.nvim_buf_get_name(bufnr) == '' then
    return false, 'buffer has no name (save it to a file first)'
  end
  if M.byte_size(bufnr) > max_bytes then
    return false, ('buffer is larger than max_buffer_bytes (%d)'):format(max_bytes)
  end
  if not M.is_utf8(bufnr) then
    return false, 'buffer is not valid UTF-8'
  end
  return true, nil
end

--- The first word of `text`: leading blanks plus a run of word characters, or of punctuation;
--- a leading line break comes with the next line's indentation.
---@param text string
---@return string
function M.first_word(text)
  return text:match('^\n[ \t]*')
    or text:match('^[ \t]*[%w_\128-\255]+')
    or text:match('^[ \t]*[^%w_%s\128-\255]+')
    or text:match('^[ \t]+')
    or text:sub(1, 1)
end

--- The rest of the current line of `text`, including its line break.
---@param text string
---@return string
function M.first_line(text)
  return text:match('^[^\n]*\n?')
end

--- Text of the buffer between two (row, col) byte positions, rows 0-based; nil if the span is invalid.
---@return string|nil
function M.text_between(bufnr, srow, scol, erow, ecol)
  if erow < srow or (erow == srow and ecol < scol) then
    return nil
  end
  local ok, lines = pcall(vim.api.nvim_buf_get_text, bufnr, srow, scol, erow, ecol, {})
  if not ok then
    return nil
  end
  return table.concat(lines, '\n')
end

--- Byte column of an LSP position on `row` of `bufnr`.
function M.byte_col(bufnr, row, character, encoding)
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ''
  local ok, col = pcall(vim.str_byteindex, line, encoding, character, false)
  return ok and col or #line
end

--- Removes snippet syntax ($1, ${2:text}, $0) leaving the placeholder text.
function M.snippet_to_text(snippet)
  local text = snippet:gsub('%${%d+:([^}]*)}', '%1'):gsub('%${%d+}', ''):gsub('%$%d+', '')
  return (text:gsub('\\([$}\\])', '%1'))
end

return M
