-- moonkale.nvim: attach Neovim to moonkale-service and tell it what core
-- Neovim never sends over LSP: the live cursor/selection and the diagnostics
-- of the user's other language servers. Wire format: docs/protocol.md.

local M = {}

local defaults = {
  -- Started as a stdio language server; the shim finds the workspace's
  -- service or starts one.
  cmd = { 'moonkale-shim' },
  -- Unix socket of a running service: connect straight to it (no shim).
  socket = nil,
  -- The service runs `moonkale-service claude` for :MoonkaleClaude.
  service_cmd = 'moonkale-service',
  -- nil: every buffer with a file; else a list of filetypes.
  filetypes = nil,
  root_markers = { '.git' },
  -- Buffer-local normal-mode keys (false or '' for none).
  keymaps = {
    -- In a proposal (Claude Code's proposed edit, shown as a diff); a hunk
    -- is the one under the cursor.
    accept = '<leader>ma',
    reject = '<leader>mr',
    keep_hunk = '<leader>mk',
    revert_hunk = '<leader>mu',
    -- In a file Claude changed, opened with :MoonkaleChangeDiff.
    undo_change = '<leader>mu',
    undo_file = '<leader>mU',
    keep_file = '<leader>mk',
  },
}

M.config = vim.deepcopy(defaults)

local NAME = 'moonkale'
local has_011 = vim.fn.has('nvim-0.11') == 1

-- 0.11 made client methods colon calls and deprecated the dot form.
local function notify(client, method, params)
  if has_011 then
    return client:notify(method, params)
  end
  return client.notify(method, params)
end

local function request(client, method, params, handler, buf)
  if has_011 then
    return client:request(method, params, handler, buf)
  end
  return client.request(method, params, handler, buf)
end

--- `client`'s `method` request; `handler(err, result)`. With `buf`,
--- Neovim flushes that buffer's pending didChange first.
function M.request(client, method, params, handler, buf)
  return request(client, method, params, handler, buf)
end

--- `method` answered within 5 s: its result, or nil and the error.
function M.request_sync(client, method, params, buf)
  local response, why
  if has_011 then
    response, why = client:request_sync(method, params, 5000, buf)
  else
    response, why = client.request_sync(method, params, 5000, buf)
  end
  if not response then
    return nil, { message = why or (method .. ': no answer') }
  end
  return response.result, response.err
end

--- "1 file", "2 files": `n` of `noun` (one whose plural adds an s).
function M.count(n, noun)
  return ('%d %s%s'):format(n, noun, n == 1 and '' or 's')
end

--- The moonkale client of `buf` (0: current), or any moonkale client.
function M.client(buf)
  buf = (buf == nil or buf == 0) and vim.api.nvim_get_current_buf() or buf
  return vim.lsp.get_clients({ name = NAME, bufnr = buf })[1] or vim.lsp.get_clients({ name = NAME })[1]
end

--- For statuslines and tests: is the current buffer attached?
function M.status()
  local buf = vim.api.nvim_get_current_buf()
  local client = vim.lsp.get_clients({ name = NAME, bufnr = buf })[1]
  return {
    attached = client ~= nil,
    initialized = client ~= nil and client.initialized == true,
    offset_encoding = client and client.offset_encoding or vim.NIL,
    root = client and client.config.root_dir or vim.NIL,
  }
end

local function root_of(buf)
  return vim.fs.root(buf, M.config.root_markers) or vim.fn.getcwd()
end

--- The client's column for byte `col` of `line` (Neovim counts bytes; the
--- service counts in the encoding it negotiated with this client).
local function to_enc(line, col, enc)
  col = math.min(col, #line)
  if enc == 'utf-8' then
    return col
  end
  if has_011 then
    return vim.str_utfindex(line, enc, col, false)
  end
  local u32, u16 = vim.str_utfindex(line, col) -- 0.10 signature
  return enc == 'utf-16' and u16 or u32
end

local function get_line(buf, lnum)
  return vim.api.nvim_buf_get_lines(buf, lnum, lnum + 1, false)[1] or ''
end

local function pos(buf, lnum, col, enc)
  return { line = lnum, character = to_enc(get_line(buf, lnum), col, enc) }
end

--- `moonkale/selectionChanged` params for the current window, or nil.
local function selection_params(client)
  local buf = vim.api.nvim_get_current_buf()
  if not vim.lsp.buf_is_attached(buf, client.id) then
    return nil
  end
  local enc = client.offset_encoding
  local cur = vim.api.nvim_win_get_cursor(0) -- 1-based line, 0-based byte col
  local cl, cc = cur[1] - 1, cur[2]
  local mode = vim.fn.mode()
  local params = { textDocument = { uri = vim.uri_from_bufnr(buf) } }
  -- Blockwise (CTRL-V) has no LSP shape; it is sent as the charwise range
  -- between its corners.
  if mode == 'v' or mode == 'V' or mode == '\22' then
    local v = vim.fn.getpos('v') -- the other end of the visual area
    local al, ac = v[2] - 1, v[3] - 1
    local cursor_first = cl < al or (cl == al and cc < ac)
    local sl, sc, el, ec
    if cursor_first then
      sl, sc, el, ec = cl, cc, al, ac
    else
      sl, sc, el, ec = al, ac, cl, cc
    end
    local start, stop
    if mode == 'V' then
      -- Whole lines: LSP ranges are end-exclusive, so end at the next line.
      start, stop = { line = sl, character = 0 }, { line = el + 1, character = 0 }
    else
      -- Visual mode includes the character under the end; step past it
      -- (a multi-byte character counts as one).
      local eline = get_line(buf, el)
      if ec < #eline then
        ec = ec + vim.str_utf_end(eline, ec + 1) + 1
      end
      start, stop = pos(buf, sl, sc, enc), pos(buf, el, ec, enc)
    end
    params.selection = { start = start, ['end'] = stop }
    -- The anchor is whichever end the cursor is not at.
    params.cursor = cursor_first and start or stop
  else
    local p = pos(buf, cl, cc, enc)
    params.selection = { start = p, ['end'] = p }
    params.cursor = p
  end
  return params
end

local last_sent
local send_pending = false

local function send_selection()
  send_pending = false
  local client = M.client(0)
  if not (client and client.initialized) then
    return
  end
  local params = selection_params(client)
  if not params then
    return
  end
  -- Cursor events fire on every redraw-worthy move; only changes matter.
  local key = vim.json.encode(params)
  if key == last_sent then
    return
  end
  last_sent = key
  notify(client, 'moonkale/selectionChanged', params)
end

-- Every change goes out at once: the service paces what reaches Claude Code
-- (docs/protocol.md). The events of one loop iteration (a ModeChanged and a
-- CursorMoved of the same key) share one send of the newest state.
local function schedule_selection()
  if send_pending then
    return
  end
  send_pending = true
  vim.schedule(send_selection)
end

-- Per buffer and source, what we forwarded last (as JSON): a source whose
-- diagnostics all went away is sent as an empty list (which removes it in
-- the service), and an unchanged one is not sent again.
local forwarded = {}

--- Source name of a diagnostic namespace: the LSP client's name for
--- `vim.lsp.<name>.<id>…` namespaces, else the namespace's own name.
local function source_of(ns)
  local name = (vim.diagnostic.get_namespace(ns) or {}).name or tostring(ns)
  return name:match('^vim%.lsp%.(.-)%.%d+') or name
end

local function forward_diagnostics(buf)
  local client = vim.lsp.get_clients({ name = NAME, bufnr = buf })[1]
  if not (client and client.initialized) then
    return
  end
  local enc = client.offset_encoding
  local by_source = {}
  for _, d in ipairs(vim.diagnostic.get(buf)) do
    local source = source_of(d.namespace)
    -- The service's own (pulled) diagnostics came from other editors.
    if source ~= NAME then
      by_source[source] = by_source[source] or {}
      table.insert(by_source[source], {
        range = {
          start = pos(buf, d.lnum, d.col, enc),
          ['end'] = pos(buf, d.end_lnum or d.lnum, d.end_col or d.col, enc),
        },
        severity = d.severity, -- vim.diagnostic.severity matches LSP's 1..4
        message = d.message,
        source = d.source,
        code = d.code,
      })
    end
  end
  local uri = vim.uri_from_bufnr(buf)
  local before = forwarded[buf] or {}
  for source in pairs(before) do
    if not by_source[source] then
      notify(client, 'moonkale/publishDiagnostics', { uri = uri, source = source, diagnostics = {} })
    end
  end
  -- DiagnosticChanged fires for every namespace (the service's pulled ones
  -- too), so only sources whose list really changed are sent again.
  local now = {}
  for source, list in pairs(by_source) do
    now[source] = vim.json.encode(list)
    if now[source] ~= before[source] then
      notify(client, 'moonkale/publishDiagnostics', { uri = uri, source = source, diagnostics = list })
    end
  end
  forwarded[buf] = now
end

local review = require('moonkale.review')

-- The service's messages that open and close the review views: a
-- proposal's showDocument opens a diff tab instead of a plain window.
local handlers = {
  ['window/showDocument'] = function(err, params, ctx, config)
    if params and params.uri and review.is_proposal(params.uri) then
      review.show_proposal(vim.lsp.get_client_by_id(ctx.client_id), params.uri)
      return { success = true }
    end
    return vim.lsp.handlers['window/showDocument'](err, params, ctx, config)
  end,
  ['workspace/applyEdit'] = function(err, params, ctx, config)
    local result = vim.lsp.handlers['workspace/applyEdit'](err, params, ctx, config)
    if params and params.edit then
      review.edit_applied(params.edit)
    end
    return result
  end,
  ['moonkale/proposalClosed'] = function(_, params)
    vim.schedule(function()
      review.proposal_closed(params)
    end)
    return vim.NIL
  end,
  ['moonkale/changes/changed'] = function(_, params)
    vim.schedule(function()
      review.changes_changed(params)
    end)
    return vim.NIL
  end,
}

local function attach(buf)
  if vim.bo[buf].buftype ~= '' or vim.api.nvim_buf_get_name(buf) == '' then
    return
  end
  local fts = M.config.filetypes
  if fts and not vim.tbl_contains(fts, vim.bo[buf].filetype) then
    return
  end
  if vim.lsp.get_clients({ name = NAME, bufnr = buf })[1] then
    return
  end
  vim.lsp.start({
    name = NAME,
    cmd = M.config.socket and vim.lsp.rpc.connect(M.config.socket) or M.config.cmd,
    root_dir = root_of(buf),
    handlers = handlers,
    -- The plugin tells of finished change sets itself, and shows and
    -- decides proposals in its diff tab (review.lua): the service asks no
    -- Accept/Reject question and edits no clean buffer of an accepted file.
    init_options = { moonkaleReview = true, moonkaleProposals = true },
  }, { bufnr = buf })
end

--- Runs `:MoonkaleClaude`'s program in a terminal in the root.
function M.claude()
  local client = M.client(0)
  local root = client and client.config.root_dir or root_of(0)
  local argv = { M.config.service_cmd, 'claude' }
  vim.cmd('botright split')
  vim.cmd.enew()
  if has_011 then
    vim.fn.jobstart(argv, { term = true, cwd = root })
  else
    vim.fn.termopen(argv, { cwd = root })
  end
  vim.cmd.startinsert()
end

--- `workspace/executeCommand` on the moonkale client; errors are shown,
--- a result goes to `on_result` if given.
function M.execute(command, arguments, on_result)
  local client = M.client(0)
  if not client then
    vim.notify('moonkale: no client attached', vim.log.levels.ERROR)
    return
  end
  -- Passing the buffer makes Neovim flush its debounced didChange first, so
  -- the service decides on exactly what the buffer shows.
  request(client, 'workspace/executeCommand', { command = command, arguments = arguments }, function(err, result)
    if err then
      vim.notify(('moonkale: %s: %s'):format(command, err.message), vim.log.levels.ERROR)
    elseif on_result then
      on_result(result)
    end
  end, vim.api.nvim_get_current_buf())
end

--- Sends lines `first`..`last` (1-based, inclusive) of the current buffer.
function M.send_to_claude(first, last)
  local uri = vim.uri_from_bufnr(0)
  -- Whole lines: end at column 0 of the line after, as LSP ranges do.
  local range = { start = { line = first - 1, character = 0 }, ['end'] = { line = last, character = 0 } }
  M.execute('moonkale.sendToClaude', { uri, range }, function(result)
    -- The service keeps a mention no Claude Code took (`{"queued": true}`)
    -- for the next one that connects; without this the user would think
    -- it was sent.
    if type(result) == 'table' and result.queued then
      vim.notify(
        'moonkale: no Claude Code is connected; the mention waits for the next one that connects'
          .. ' (:MoonkaleClaude starts one)',
        vim.log.levels.WARN
      )
    end
  end)
end

function M.setup(opts)
  M.config = vim.tbl_deep_extend('force', vim.deepcopy(defaults), opts or {})
  local group = vim.api.nvim_create_augroup('moonkale', { clear = true })
  vim.api.nvim_create_autocmd({ 'BufReadPost', 'BufNewFile', 'FileType' }, {
    group = group,
    callback = function(ev)
      attach(ev.buf)
    end,
  })
  vim.api.nvim_create_autocmd({ 'CursorMoved', 'CursorMovedI', 'ModeChanged' }, {
    group = group,
    callback = schedule_selection,
  })
  vim.api.nvim_create_autocmd('LspAttach', {
    group = group,
    callback = function(ev)
      local client = vim.lsp.get_client_by_id(ev.data.client_id)
      if client and client.name == NAME then
        -- A new client (e.g. after a service restart) knows nothing yet.
        last_sent = nil
        forwarded[ev.buf] = nil
        schedule_selection()
        forward_diagnostics(ev.buf)
      end
    end,
  })
  vim.api.nvim_create_autocmd('DiagnosticChanged', {
    group = group,
    callback = function(ev)
      forward_diagnostics(ev.buf)
    end,
  })
  vim.api.nvim_create_autocmd('BufWipeout', {
    group = group,
    callback = function(ev)
      forwarded[ev.buf] = nil
    end,
  })
  -- Buffers loaded before setup (e.g. lazy loading) attach now.
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) then
      attach(buf)
    end
  end
end

return M
