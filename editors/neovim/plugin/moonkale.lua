-- User commands of moonkale.nvim. They work once require('moonkale').setup()
-- has attached a client; setup itself stays the user's call, so installing
-- the plugin never starts a server on its own.

if vim.g.loaded_moonkale then
  return
end
vim.g.loaded_moonkale = true

local cmd = vim.api.nvim_create_user_command

-- `:MoonkaleSendToClaude` sends the current line, `:'<,'>MoonkaleSendToClaude`
-- (or any range) those lines, as an @-mention to Claude Code.
cmd('MoonkaleSendToClaude', function(o)
  require('moonkale').send_to_claude(o.line1, o.line2)
end, { range = true, desc = 'Send the selected lines to Claude Code' })

-- The proposal decided is the one named by the argument (proposal URI,
-- target file URI or Claude Code's tab name), else the one in the current
-- buffer, else the newest.
cmd('MoonkaleAccept', function(o)
  require('moonkale.review').accept(o.args)
end, { nargs = '?', desc = "Accept Claude Code's proposed edit" })

-- The argument is the user's reason; Claude Code's next prompt points at the
-- rejected lines so it can be told.
cmd('MoonkaleReject', function(o)
  require('moonkale.review').reject(o.args)
end, { nargs = '?', desc = "Reject Claude Code's proposed edit" })

cmd('MoonkaleClaude', function()
  require('moonkale').claude()
end, { desc = 'Run Claude Code in a terminal, wired to moonkale-service' })

-- Change sets: what Claude changed without asking, reviewed after the fact.
cmd('MoonkaleChanges', function()
  require('moonkale.review').changes_to_quickfix()
end, { desc = "Claude's newest pending changes in the quickfix list" })

cmd('MoonkaleChangeDiff', function()
  require('moonkale.review').change_diff()
end, { desc = "Diff the file (under the cursor in quickfix, or this one) against its text before Claude's change" })

cmd('MoonkaleChangeNext', function()
  require('moonkale.review').change_step(1)
end, { desc = "The diff of the next file Claude changed" })

cmd('MoonkaleChangePrev', function()
  require('moonkale.review').change_step(-1)
end, { desc = "The diff of the previous file Claude changed" })
