-- moonkale.nvim's review views: Claude Code's proposed edits (openDiff) as a
-- side-by-side diff in a tab of their own, and change sets (edits Claude made
-- without asking) reviewed after the fact, in the quickfix list and the same
-- kind of diff. Wire: docs/protocol.md, "Proposals as diffs" and "Change
-- sets: review after the fact".

local M = {}

local function moonkale()
  return require('moonkale')
end

local function notify_error(what, err)
  vim.notify(('moonkale: %s: %s'):format(what, err.message or tostring(err)), vim.log.levels.ERROR)
end

--- The file of a URI, spelled as Neovim names its buffers (`[id].tsx` and
--- `%5Bid%5D.tsx` are the same file).
local function path_of(uri)
  return vim.fs.normalize(vim.uri_to_fname(uri))
end

local function buf_path(buf)
  return vim.fs.normalize(vim.api.nvim_buf_get_name(buf))
end

--- Whether `buf` holds exactly what its file on disk holds.
local function same_as_disk(buf)
  local path = buf_path(buf)
  return vim.fn.filereadable(path) == 1
    and vim.deep_equal(vim.fn.readfile(path), vim.api.nvim_buf_get_lines(buf, 0, -1, false))
end

local function lines_of(text)
  local lines = vim.split(text or '', '\n', { plain = true })
  -- A final newline ends the last line; it does not start another.
  if lines[#lines] == '' then
    table.remove(lines)
  end
  return lines
end

-- Scratch buffers we made, by name: a new view of the same file replaces
-- the old one's (a buffer name is unique).
local scratch_bufs = {}

--- A readonly `nofile` buffer named `name` holding `text`, highlighted as
--- `filetype`. It is wiped when no window shows it any more.
local function scratch(name, text, filetype)
  local old = scratch_bufs[name]
  if old and vim.api.nvim_buf_is_valid(old) then
    vim.api.nvim_buf_delete(old, { force = true })
  end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, name)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines_of(text))
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].swapfile = false
  vim.bo[buf].modifiable = false
  vim.bo[buf].readonly = true
  if filetype and filetype ~= '' then
    vim.bo[buf].filetype = filetype
  end
  scratch_bufs[name] = buf
  return buf
end

--- Shows `left_buf` to the left of window `right`, both in diff mode (the
--- cursor stays in `right`; `]c`/`[c` and `do`/`dp` are Neovim's own).
local function diff_beside(right, left_buf)
  local left = vim.api.nvim_open_win(left_buf, false, { split = 'left', win = right })
  for _, win in ipairs({ left, right }) do
    vim.api.nvim_win_call(win, function()
      vim.cmd.diffthis()
    end)
  end
  return left
end

local function close_tab(tab)
  if tab and vim.api.nvim_tabpage_is_valid(tab) and #vim.api.nvim_list_tabpages() > 1 then
    vim.cmd.tabclose(vim.api.nvim_tabpage_get_number(tab))
  end
end

--- The hunk whose `range` (0-based, end exclusive) holds 0-based `line`;
--- a hunk that only deletes (empty range) is found on the line above or at
--- its place, where diff mode draws it. `ok` filters (e.g. pending only).
local function hunk_at(hunks, range, line, ok)
  local near
  for _, h in ipairs(hunks or {}) do
    if not ok or ok(h) then
      local r = h[range]
      if r.start <= line and line < r['end'] then
        return h
      end
      if r.start == r['end'] and (line == r.start or line == r.start - 1) then
        near = near or h
      end
    end
  end
  return near
end

local function cursor_line()
  return vim.api.nvim_win_get_cursor(0)[1] - 1
end

-- Proposals -----------------------------------------------------------------

-- Proposal documents live in the service's runtime directory:
-- `$XDG_RUNTIME_DIR/moonkale/proposals/…` or `/tmp/moonkale-<uid>/proposals/…`.
local PROPOSALS_DIR = '/moonkale[^/]*/proposals/'

--- Is `uri` a proposal document the service wrote?
function M.is_proposal(uri)
  return uri:match('^file:') ~= nil and path_of(uri):find(PROPOSALS_DIR) ~= nil
end

-- Open proposal views by the proposal document's path: {tab, doc, original}.
local proposal_views = {}

--- The pending proposal whose document is `path`, asked of `client` now (its
--- hunks move as the user edits), or nil and why not.
local function proposal_of(client, path, buf)
  local result, err = moonkale().request_sync(client, 'moonkale/proposals', nil, buf)
  if err then
    return nil, err
  end
  for _, p in ipairs(result and result.proposals or {}) do
    if path_of(p.document) == path then
      return p
    end
  end
  return nil, { message = 'no pending proposal for ' .. vim.fn.fnamemodify(path, ':t') }
end

--- Runs `command` with `[document, hunk index]` for the proposal hunk under
--- the cursor of the current (proposal) buffer.
local function proposal_hunk_command(command)
  local buf = vim.api.nvim_get_current_buf()
  local client = moonkale().client(buf)
  if not client then
    return vim.notify('moonkale: no client attached', vim.log.levels.ERROR)
  end
  local p, err = proposal_of(client, buf_path(buf), buf)
  if not p then
    return notify_error(command, err)
  end
  local hunk = hunk_at(p.hunks, 'proposed', cursor_line())
  if not hunk then
    return vim.notify('moonkale: no change of Claude Code under the cursor', vim.log.levels.WARN)
  end
  moonkale().execute(command, { p.document, hunk.index })
end

function M.keep_hunk()
  proposal_hunk_command('moonkale.keepHunk')
end

function M.revert_hunk()
  proposal_hunk_command('moonkale.revertHunk')
end

--- The proposal of the current buffer (its document URI, also from the
--- original's side of its diff), else the newest pending one's, else nil.
local function current_proposal()
  local buf = vim.api.nvim_get_current_buf()
  local uri = vim.uri_from_bufnr(buf)
  if M.is_proposal(uri) then
    return uri
  end
  for path, view in pairs(proposal_views) do
    if view.original == buf then
      return vim.uri_from_fname(path)
    end
  end
  local client = moonkale().client(buf)
  local result = client and moonkale().request_sync(client, 'moonkale/proposals', nil)
  local list = result and result.proposals or {}
  return list[#list] and list[#list].document
end

--- `:MoonkaleAccept [proposal]`.
function M.accept(proposal)
  proposal = proposal ~= '' and proposal or current_proposal()
  moonkale().execute('moonkale.acceptProposal', { proposal })
end

--- `:MoonkaleReject [reason]`.
function M.reject(reason)
  local proposal = current_proposal()
  local args = proposal and (reason ~= '' and { proposal, reason } or { proposal }) or {}
  moonkale().execute('moonkale.rejectProposal', args)
end

local function map(buf, lhs, fn, desc)
  if lhs and lhs ~= '' then
    vim.keymap.set('n', lhs, fn, { buffer = buf, desc = desc, silent = true })
  end
end

local function proposal_keymaps(buf)
  local keys = moonkale().config.keymaps
  map(buf, keys.accept, function()
    M.accept('')
  end, "Accept Claude Code's proposed edit")
  map(buf, keys.reject, function()
    M.reject('')
  end, "Reject Claude Code's proposed edit")
  map(buf, keys.keep_hunk, M.keep_hunk, "Keep Claude Code's change under the cursor")
  map(buf, keys.revert_hunk, M.revert_hunk, "Revert Claude Code's change under the cursor")
end

--- A key as the user types it (`<leader>` is their mapleader), or nil.
local function key_name(lhs)
  if not lhs or lhs == '' then
    return nil
  end
  local leader = vim.g.mapleader
  if leader == nil or leader == '' then
    leader = '\\'
  end
  return (lhs:gsub('<[Ll]eader>', function()
    return leader
  end))
end

--- A window bar's text (`%` is special there).
local function bar(parts)
  return ' ' .. table.concat(parts, '  '):gsub('%%', '%%%%')
end

--- The window bars of a proposal's diff: what each side is and how to
--- decide, so the user decides looking at the change (never in a prompt
--- over a window that does not show it). The keys work in the proposal.
local function proposal_bars(view, left, right)
  local keys = moonkale().config.keymaps
  local name = vim.fn.fnamemodify(view.target, ':t')
  vim.wo[left].winbar = bar({ name .. ' on disk · decide with :MoonkaleAccept or :MoonkaleReject' })
  local named = { "Claude Code's proposal" }
  for _, k in ipairs({ { keys.accept, 'accept' }, { keys.reject, 'reject' }, { keys.keep_hunk, 'keep' }, { keys.revert_hunk, 'revert' } }) do
    local key = key_name(k[1])
    if key then
      table.insert(named, key .. ' ' .. k[2])
    end
  end
  vim.wo[right].winbar = bar(named)
end

--- `window/showDocument` of a proposal document: a new tab with the
--- target's original text on the left and the (editable) proposal on the
--- right, in diff mode, their window bars naming the keys. Without
--- `moonkale/proposals` (an older service) the tab shows the proposal
--- alone, as a plain showDocument would.
function M.show_proposal(client, uri)
  local path = path_of(uri)
  local old = proposal_views[path]
  if old and old.tab and vim.api.nvim_tabpage_is_valid(old.tab) then
    vim.api.nvim_set_current_tabpage(old.tab)
    return
  end
  vim.cmd.tabnew(vim.fn.fnameescape(path))
  local view = { tab = vim.api.nvim_get_current_tabpage(), doc = vim.api.nvim_get_current_buf() }
  proposal_views[path] = view
  proposal_keymaps(view.doc)
  local right = vim.api.nvim_get_current_win()
  moonkale().request(client, 'moonkale/proposals', nil, function(err, result)
    if err or not vim.api.nvim_win_is_valid(right) then
      return
    end
    for _, p in ipairs(result and result.proposals or {}) do
      if path_of(p.document) == path then
        view.target = path_of(p.target)
        local name = 'moonkale://original/' .. vim.fn.fnamemodify(view.target, ':.')
        view.original = scratch(name, p.original, vim.bo[view.doc].filetype)
        proposal_bars(view, diff_beside(right, view.original), right)
        return
      end
    end
  end, view.doc)
end

--- `moonkale/proposalClosed`: the proposal was answered; its tab closes and
--- both buffers go. Edits made in the proposal are not lost: they were the
--- accepted answer, or rejected with it. Accepted, a buffer of the target
--- follows the file once Claude Code wrote it.
function M.proposal_closed(params)
  local path = path_of(params.uri)
  local view = proposal_views[path] or {}
  proposal_views[path] = nil
  close_tab(view.tab)
  -- (view.original is nil when the diff could not be made.)
  for _, buf in pairs({ view.original or -1, vim.fn.bufnr(path) }) do
    if buf ~= -1 and vim.api.nvim_buf_is_valid(buf) then
      vim.api.nvim_buf_delete(buf, { force = true })
    end
  end
  if params.accepted and type(params.text) == 'string' and params.target then
    M.follow_write(path_of(params.target), params.text)
  end
end

--- The bytes of file `path`, or nil.
local function read_file(path)
  local f = io.open(path, 'rb')
  if not f then
    return nil
  end
  local text = f:read('*a')
  f:close()
  return text
end

-- Accepted targets whose buffer waits for Claude Code's write, by path:
-- {buf, text, watch (fs_event), autocmd}.
local awaiting_write = {}

-- Claude Code writes an accepted file right after it is told FILE_SAVED;
-- a buffer stops waiting for it after this long.
local WRITE_WAIT_MS = 60000

local function stop_waiting(path)
  local w = awaiting_write[path]
  awaiting_write[path] = nil
  if w then
    w.watch:stop()
    w.watch:close()
    pcall(vim.api.nvim_del_autocmd, w.autocmd)
  end
end

--- Puts `lines` back into `buf`, replacing only the lines between what
--- the two share at the start and at the end (so marks elsewhere stay
--- where they were), and the windows' `cursors` (by window).
local function put_back(buf, lines, cursors)
  if not vim.api.nvim_buf_is_loaded(buf) then
    return
  end
  local now = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  local first = 1
  while first <= #now and first <= #lines and now[first] == lines[first] do
    first = first + 1
  end
  if first <= #now or first <= #lines then
    local tail = 0
    while tail < #now - first + 1 and tail < #lines - first + 1 and now[#now - tail] == lines[#lines - tail] do
      tail = tail + 1
    end
    vim.api.nvim_buf_set_lines(buf, first - 1, #now - tail, false, vim.list_slice(lines, first, #lines - tail))
  end
  for win, cursor in pairs(cursors) do
    if vim.api.nvim_win_is_valid(win) and vim.api.nvim_win_get_buf(win) == buf then
      pcall(vim.api.nvim_win_set_cursor, win, cursor)
    end
  end
end

--- After an accept, Claude Code writes `text` to `path`; the service made
--- no edit of a clean buffer of it (that would leave it modified, and
--- Neovim would then ask about a file "changed in Vim as well", W12). Once
--- the file holds `text`, a clean buffer is reloaded; one with the user's
--- unsaved changes (which the service merged with the accepted edit, or
--- named in a warning where they collide) is reloaded too and its text put
--- back at once, still modified: Neovim then counts the file as read, so
--- neither `:checktime` nor `:w` asks about it ("changed since reading").
function M.follow_write(path, text)
  local buf = vim.fn.bufnr(path)
  if buf == -1 or not vim.api.nvim_buf_is_loaded(buf) then
    return
  end
  stop_waiting(path)
  local w = { buf = buf, text = text, watch = assert(vim.uv.new_fs_event()) }
  awaiting_write[path] = w
  -- Neovim's own check of the file (`:checktime`, focus) decides by this
  -- (without it: reload when 'autoread' and clean, else a prompt).
  w.autocmd = vim.api.nvim_create_autocmd('FileChangedShell', {
    buffer = buf,
    callback = function()
      if read_file(path) ~= text then
        vim.v.fcs_choice = 'ask'
        return
      end
      if vim.bo[buf].modified then
        -- (No buffer may change inside this event: right after it.)
        local keep = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
        local cursors = {}
        for _, win in ipairs(vim.fn.win_findbuf(buf)) do
          cursors[win] = vim.api.nvim_win_get_cursor(win)
        end
        vim.schedule(function()
          put_back(buf, keep, cursors)
        end)
      end
      vim.v.fcs_choice = 'reload'
    end,
  })
  local function written()
    if awaiting_write[path] ~= w or read_file(path) ~= text then
      return
    end
    if vim.api.nvim_buf_is_loaded(buf) then
      vim.cmd.checktime(buf)
      -- A buffer the user made equal to it is not modified.
      if vim.bo[buf].modified and same_as_disk(buf) then
        vim.bo[buf].modified = false
      end
    end
    stop_waiting(path)
  end
  -- The folder, not the file: a write by rename replaces the file's inode.
  local name = vim.fs.basename(path)
  w.watch:start(vim.fs.dirname(path), {}, function(err, changed)
    if not err and changed == name then
      vim.schedule(written)
    end
  end)
  vim.defer_fn(function()
    if awaiting_write[path] == w then
      stop_waiting(path)
    end
  end, WRITE_WAIT_MS)
  -- It may be written already.
  written()
end

-- Change sets ---------------------------------------------------------------

--- `moonkale/changes/changed`: an announced set (its turn just ended) is
--- told with vim.notify.
function M.changes_changed(params)
  local sets = params.sets or {}
  -- Claude wrote these files on disk: clean buffers of them show it now
  -- (with 'autoread'), not at the next focus change.
  for _, set in ipairs(sets) do
    for _, f in ipairs(set.files) do
      local buf = vim.fn.bufnr(path_of(f.uri))
      if buf ~= -1 and vim.api.nvim_buf_is_loaded(buf) and not vim.bo[buf].modified then
        vim.cmd.checktime(buf)
      end
    end
  end
  if params.announce == nil or params.announce == vim.NIL then
    return
  end
  for _, set in ipairs(sets) do
    if set.id == params.announce then
      local names = vim.tbl_map(function(f)
        return vim.fn.fnamemodify(path_of(f.uri), ':.')
      end, set.files)
      vim.notify(
        ('Claude changed %s: %s (:MoonkaleChanges to review)'):format(
          moonkale().count(#names, 'file'),
          table.concat(names, ', ')
        ),
        vim.log.levels.INFO
      )
    end
  end
end

local function changes_client()
  local client = moonkale().client(0)
  if not client then
    vim.notify('moonkale: no client attached', vim.log.levels.ERROR)
  end
  return client
end

--- The newest pending set (holding `path`, if given) with its files, from
--- `moonkale/changes/list` and `show`; nil (and a message shown) if none.
local function pending_set(client, path)
  local listed, err = moonkale().request_sync(client, 'moonkale/changes/list', nil)
  if err then
    return notify_error('moonkale/changes/list', err)
  end
  local sets = listed and listed.sets or {}
  for i = #sets, 1, -1 do
    local holds = path == nil
      or vim.iter(sets[i].files):any(function(f)
        return path_of(f.uri) == path
      end)
    if sets[i].state == 'pending' and holds then
      local shown, show_err = moonkale().request_sync(client, 'moonkale/changes/show', { set = sets[i].id })
      if show_err then
        return notify_error('moonkale/changes/show', show_err)
      end
      return shown
    end
  end
  vim.notify(
    path and ('moonkale: no pending change of Claude to %s'):format(vim.fn.fnamemodify(path, ':.'))
      or 'moonkale: Claude has no pending changes',
    vim.log.levels.INFO
  )
end

local function file_in(shown, path)
  for i, f in ipairs(shown.files) do
    if path_of(f.uri) == path then
      return f, i
    end
  end
end

local function hunk_summary(h)
  local first = lines_of(h.added)[1] or lines_of(h.removed)[1] or ''
  return ('-%d +%d: %s'):format(#lines_of(h.removed), #lines_of(h.added), vim.trim(first))
end

--- `:MoonkaleChanges`: the newest pending set in the quickfix list, one
--- entry per pending hunk, at the lines Claude wrote.
function M.changes_to_quickfix()
  local client = changes_client()
  local shown = client and pending_set(client)
  if not shown then
    return
  end
  local items = {}
  for _, f in ipairs(shown.files) do
    for _, h in ipairs(f.hunks) do
      if h.state == 'pending' then
        table.insert(items, {
          filename = path_of(f.uri),
          lnum = h.after.start + 1,
          text = ('%s %s'):format(f.kind, hunk_summary(h)),
        })
      end
    end
  end
  vim.fn.setqflist({}, ' ', {
    title = ("Claude's changes: %s"):format(shown.set.title),
    items = items,
    context = { moonkale_set = shown.set.id },
  })
  vim.cmd.copen()
end

-- Open change views by file path: {tab, set, before}.
local change_views = {}

--- The file `:MoonkaleChangeDiff` means: the quickfix entry under the
--- cursor in the quickfix window, else the current buffer's file.
local function file_under_cursor()
  if vim.bo.buftype == 'quickfix' then
    local item = vim.fn.getqflist()[vim.fn.line('.')]
    if item and item.bufnr > 0 then
      return buf_path(item.bufnr)
    end
  end
  return buf_path(0)
end

local function change_keymaps(buf)
  local keys = moonkale().config.keymaps
  map(buf, keys.undo_change, M.undo_hunk, "Undo Claude's change under the cursor")
  map(buf, keys.undo_file, M.undo_file, "Undo all of Claude's changes to this file")
  map(buf, keys.keep_file, M.keep_file, "Keep Claude's changes to this file")
end

--- `:MoonkaleChangeDiff`: the file (under the cursor, or the current one)
--- in a new tab against its text before Claude's pending set, with keymaps
--- to undo a hunk, undo the file or keep it.
function M.change_diff(path)
  path = path or file_under_cursor()
  local client = changes_client()
  local shown = client and pending_set(client, path)
  local file = shown and file_in(shown, path)
  if not file then
    return
  end
  local old = change_views[path]
  if old then
    close_tab(old.tab)
  end
  local name = 'moonkale://before/' .. vim.fn.fnamemodify(path, ':.')
  local before = file.before ~= vim.NIL and file.before or ''
  vim.cmd.tabnew(vim.fn.fnameescape(path))
  local buf = vim.api.nvim_get_current_buf()
  local left = scratch(name, before, vim.bo[buf].filetype)
  diff_beside(vim.api.nvim_get_current_win(), left)
  change_views[path] = { tab = vim.api.nvim_get_current_tabpage(), set = shown.set.id, before = left }
  change_keymaps(buf)
  local first = vim.iter(file.hunks):find(function(h)
    return h.state == 'pending'
  end)
  if first then
    vim.api.nvim_win_set_cursor(0, { math.min(first.after.start + 1, vim.api.nvim_buf_line_count(buf)), 0 })
  end
end

--- After the service's `workspace/applyEdit`: a buffer it made equal to its
--- file (an undo writes the file and sends clean buffers the same text) is
--- not modified, so it stays clean for the next undo or reload.
function M.edit_applied(edit)
  local uris = vim.tbl_keys(edit.changes or {})
  for _, change in ipairs(edit.documentChanges or {}) do
    if change.textDocument then
      table.insert(uris, change.textDocument.uri)
    end
  end
  for _, uri in ipairs(uris) do
    local buf = vim.uri_to_bufnr(uri)
    if vim.api.nvim_buf_is_loaded(buf) and vim.bo[buf].modified and same_as_disk(buf) then
      vim.bo[buf].modified = false
    end
  end
end

--- After an undo the service wrote the file and sent `workspace/applyEdit`
--- to clean buffers; a buffer that did not get it reloads from disk.
local function after_undo(buf)
  if not vim.api.nvim_buf_is_valid(buf) then
    return
  end
  local path = buf_path(buf)
  if vim.fn.filereadable(path) == 0 then
    -- Claude created it; undone, it is gone: so is its view. (The service
    -- refuses to undo a file held with unsaved changes.)
    local view = change_views[path]
    change_views[path] = nil
    close_tab(view and view.tab)
    vim.api.nvim_buf_delete(buf, { force = true })
    return
  end
  if same_as_disk(buf) then
    vim.bo[buf].modified = false
  elseif not vim.bo[buf].modified then
    vim.api.nvim_buf_call(buf, function()
      vim.cmd('silent! checktime')
    end)
  end
  vim.cmd('silent! diffupdate')
end

local function undo(params, buf)
  local client = changes_client()
  if not client then
    return
  end
  moonkale().request(client, 'moonkale/changes/undo', params, function(err, result)
    if err then
      -- A refused hunk (its lines changed since Claude wrote them): the
      -- user's text stays, the message says which lines.
      return notify_error('undo', err)
    end
    for _, r in ipairs(result.refused or {}) do
      vim.notify('moonkale: ' .. r.message, vim.log.levels.WARN)
    end
    vim.schedule(function()
      after_undo(buf)
    end)
  end, buf)
end

--- The set and file of the change view (or changed file) in the current
--- buffer, or nil.
local function current_change()
  local buf = vim.api.nvim_get_current_buf()
  local path = buf_path(buf)
  local view = change_views[path]
  if view then
    return view.set, path, buf
  end
  local client = changes_client()
  local shown = client and pending_set(client, path)
  if shown then
    return shown.set.id, path, buf
  end
end

function M.undo_hunk()
  local set, path, buf = current_change()
  if not set then
    return
  end
  local client = changes_client()
  local shown, err = moonkale().request_sync(client, 'moonkale/changes/show', { set = set })
  if err then
    return notify_error('moonkale/changes/show', err)
  end
  local file = file_in(shown, path)
  local hunk = file
    and hunk_at(file.hunks, 'after', cursor_line(), function(h)
      return h.state == 'pending'
    end)
  if not hunk then
    return vim.notify("moonkale: no pending change of Claude's under the cursor", vim.log.levels.WARN)
  end
  undo({ set = set, uri = file.uri, hunk = hunk.index }, buf)
end

function M.undo_file()
  local set, path, buf = current_change()
  if set then
    undo({ set = set, uri = vim.uri_from_fname(path) }, buf)
  end
end

function M.keep_file()
  local set, path = current_change()
  if not set then
    return
  end
  moonkale().request(changes_client(), 'moonkale/changes/keep', { set = set, uri = vim.uri_from_fname(path) }, function(err)
    if err then
      return notify_error('keep', err)
    end
    vim.notify(('moonkale: kept Claude\'s changes to %s'):format(vim.fn.fnamemodify(path, ':.')))
  end)
end

--- `:MoonkaleChangeNext` / `Prev`: the diff of the next (`step` 1) or
--- previous (-1) file of the pending set, after the current one.
function M.change_step(step)
  local client = changes_client()
  local shown = client and pending_set(client)
  if not shown or #shown.files == 0 then
    return
  end
  local _, i = file_in(shown, buf_path(0))
  if not i then
    i = step > 0 and 0 or 1
  end
  local next_file = shown.files[(i - 1 + step) % #shown.files + 1]
  local here = change_views[buf_path(0)]
  if here then
    change_views[buf_path(0)] = nil
    close_tab(here.tab)
  end
  M.change_diff(path_of(next_file.uri))
end

return M
