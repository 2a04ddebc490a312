-- `:checkhealth moonkale`: what a user needs before the plugin can work.

local M = {}

function M.check()
  local h = vim.health
  local moonkale = require('moonkale')
  local config = moonkale.config

  h.start('moonkale: Neovim')
  -- vim.fs.root, vim.uv and vim.lsp.rpc.connect to a unix socket are 0.10+.
  if vim.fn.has('nvim-0.10') == 1 then
    h.ok('Neovim ' .. tostring(vim.version()))
  else
    h.error('Neovim 0.10 or newer is needed, this is ' .. tostring(vim.version()))
  end

  h.start('moonkale: executables')
  if config.socket then
    if vim.uv.fs_stat(config.socket) then
      h.ok('socket = ' .. config.socket .. ' (connecting straight to it, the shim is not used)')
    else
      h.error('socket = ' .. config.socket .. ' does not exist: is moonkale-service running?')
    end
  else
    local shim = config.cmd[1]
    local path = vim.fn.exepath(shim)
    if path ~= '' then
      h.ok('shim: ' .. shim .. ' found at ' .. path)
    else
      h.error('shim: ' .. shim .. ' is not executable or not on PATH', {
        'cargo install --path editor-shim (moonkale-shim)',
        "or setup{ cmd = { '/path/to/moonkale-shim' } }",
      })
    end
  end
  local service = vim.fn.exepath(config.service_cmd)
  if service ~= '' then
    h.ok('service: ' .. config.service_cmd .. ' found at ' .. service)
  else
    h.warn('service: ' .. config.service_cmd .. ' is not on PATH (needed by :MoonkaleClaude and by the shim to start it)')
  end

  h.start('moonkale: client')
  local clients = vim.lsp.get_clients({ name = 'moonkale' })
  if #clients == 0 then
    h.warn('no moonkale client is running: call require("moonkale").setup() and open a file')
  end
  for _, c in ipairs(clients) do
    local bufs = vim.tbl_keys(c.attached_buffers or {})
    h.ok(('client %d: root %s, %s, %s attached, %s'):format(
      c.id,
      c.config.root_dir or '?',
      c.initialized and 'initialized' or 'not initialized yet',
      moonkale.count(#bufs, 'buffer'),
      c.offset_encoding
    ))
    -- The review views need these requests; an older service lacks them.
    for _, m in ipairs({
      { 'moonkale/proposals', 'proposals as diffs' },
      { 'moonkale/changes/list', "reviewing Claude's changes" },
    }) do
      local method, what = m[1], m[2]
      if c.initialized then
        local _, err = moonkale.request_sync(c, method, nil)
        if err then
          h.warn(('%s: %s (%s)'):format(what, err.message or 'unavailable', method))
        else
          h.ok(what .. ': the service answers ' .. method)
        end
      end
    end
  end
end

return M
