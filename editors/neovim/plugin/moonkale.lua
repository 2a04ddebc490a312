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

-- Without an argument the newest pending proposal is decided; an argument
-- names one (proposal URI, target file URI or Claude Code's tab name).
cmd('MoonkaleAccept', function(o)
  require('moonkale').execute('moonkale.acceptProposal', o.args ~= '' and { o.args } or {})
end, { nargs = '?', desc = "Accept Claude Code's proposed edit" })

cmd('MoonkaleReject', function(o)
  require('moonkale').execute('moonkale.rejectProposal', o.args ~= '' and { o.args } or {})
end, { nargs = '?', desc = "Reject Claude Code's proposed edit" })

cmd('MoonkaleClaude', function()
  require('moonkale').claude()
end, { desc = 'Run Claude Code in a terminal, wired to moonkale-service' })
