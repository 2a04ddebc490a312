-- Neovim config for moonkale's end-to-end tests (tests/tests/neovim.rs).
--
-- Started as `nvim --headless --clean -u tests/nvim/init.lua --listen SOCK FILE`
-- with these environment variables:
--   MOONKALE_TEST_ROOT    the workspace folder (the client's root_dir); files
--                         under it attach the `moonkale` client
--   MOONKALE_TEST_SHIM    path of moonkale-shim: the client runs it over stdio
--   MOONKALE_TEST_SOCKET  path of the service's unix socket: the client connects
--                         to it with vim.lsp.rpc.connect (no shim)
-- Exactly one of MOONKALE_TEST_SHIM and MOONKALE_TEST_SOCKET must be set.
--
-- Nothing about the client is tuned: capabilities (and so the offered
-- position encodings) and the didChange debounce are Neovim's defaults.
-- The test reads what it needs with `--remote-expr`, through
-- `luaeval('MoonkaleTest.state()')` for the client's side.

local root = assert(vim.env.MOONKALE_TEST_ROOT, 'MOONKALE_TEST_ROOT is not set')
local shim = vim.env.MOONKALE_TEST_SHIM
local socket = vim.env.MOONKALE_TEST_SOCKET
assert((shim == nil) ~= (socket == nil), 'set exactly one of MOONKALE_TEST_SHIM and MOONKALE_TEST_SOCKET')

vim.opt.swapfile = false
vim.opt.shadafile = 'NONE'
-- The log lands in $XDG_STATE_HOME/nvim/lsp.log, inside the test's sandbox;
-- the test prints it when it fails.
vim.lsp.log.set_level(vim.env.MOONKALE_TEST_LSP_LOG or 'debug')

MoonkaleTest = {
  -- window/logMessage and window/showMessage from the server: the service
  -- reports protocol violations (e.g. a refused didChange) this way.
  messages = {},
  -- Transport errors and exits of the client.
  errors = {},
}

local function record(kind)
  return function(_, params, ctx)
    local client = ctx and vim.lsp.get_client_by_id(ctx.client_id)
    table.insert(MoonkaleTest.messages, {
      kind = kind,
      type = params.type,
      message = params.message,
      client = client and client.name or '?',
    })
  end
end

local function start(buf)
  local file = vim.api.nvim_buf_get_name(buf)
  if not vim.fs.relpath(root, file) then
    return
  end
  vim.lsp.start({
    name = 'moonkale',
    cmd = shim and { shim } or vim.lsp.rpc.connect(socket),
    root_dir = root,
    handlers = {
      ['window/logMessage'] = record('logMessage'),
      ['window/showMessage'] = record('showMessage'),
    },
    on_error = function(code, err)
      table.insert(MoonkaleTest.errors, { code = code, err = tostring(err) })
    end,
    on_exit = function(code, signal)
      table.insert(MoonkaleTest.errors, { exit = code, signal = signal })
    end,
  }, { bufnr = buf })
end

vim.api.nvim_create_autocmd({ 'BufReadPost', 'BufNewFile' }, {
  callback = function(ev)
    start(ev.buf)
  end,
})

--- The client's view of the current buffer, for the test.
function MoonkaleTest.state()
  local buf = vim.api.nvim_get_current_buf()
  local client = vim.lsp.get_clients({ bufnr = buf, name = 'moonkale' })[1]
  return {
    uri = vim.uri_from_bufnr(buf),
    attached = client ~= nil,
    initialized = client ~= nil and client.initialized == true,
    offset_encoding = client and client.offset_encoding or vim.NIL,
    messages = MoonkaleTest.messages,
    errors = MoonkaleTest.errors,
  }
end
