// Collie web companion: the phone's screens, built only on the phone API (/api/v1/...) and
// its live stream. No library, no build step. Every word comes from the gateway's catalogue.
'use strict';
(() => {
  const S = JSON.parse(document.getElementById('collie-strings').textContent);
  // A counted string's forms by CLDR plural category; the browser's Intl picks the category.
  const plurals = document.getElementById('collie-plurals');
  const P = plurals ? JSON.parse(plurals.textContent) : {};
  const LANG = document.documentElement.lang || 'en';
  let rules = null;
  try { rules = new Intl.PluralRules(LANG); } catch (e) { rules = null; }
  const form = (key, vals) => {
    const forms = P[key];
    if (!forms || !rules || !vals || typeof vals.n !== 'number') return S[key];
    return forms[rules.select(vals.n)] ?? forms.other ?? S[key];
  };
  const t = (key, vals) => String(form(key, vals) ?? key).replace(/\{(\w+)\}/g,
    (m, k) => (vals && k in vals ? String(vals[k]) : m));
  const app = document.getElementById('app');
  const net = document.getElementById('net');
  const announcer = document.getElementById('announce');
  const enc = encodeURIComponent;
  const store = window.localStorage;

  // --- theme: ?theme=light|dark fixes one (kept), ?theme=auto gives it back to the person ---
  const wanted = new URLSearchParams(location.search).get('theme');
  if (wanted === 'auto') store.removeItem('collie-theme');
  else if (wanted === 'light' || wanted === 'dark') store.setItem('collie-theme', wanted);
  const fixed = store.getItem('collie-theme');
  if (fixed) document.documentElement.dataset.theme = fixed;

  // --- DOM helper ------------------------------------------------------------------------
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : v);
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }
  const announce = (text) => { announcer.textContent = ''; setTimeout(() => { announcer.textContent = text; }, 30); };
  const newId = () => (crypto.randomUUID ? crypto.randomUUID()
    : Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join(''));

  // --- the API: the page's credential is its HttpOnly cookie (set when it pairs) ------------
  class NeedToken extends Error {}
  function headers(extra) {
    return Object.assign({ Accept: 'application/json' }, extra || {});
  }
  async function api(path, body) {
    const init = { headers: headers(body ? { 'Content-Type': 'application/json' } : null), cache: 'no-store' };
    if (body !== undefined) { init.method = 'POST'; init.body = JSON.stringify(body); }
    const resp = await fetch(path, init);
    if (resp.status === 401) { askCode(); throw new NeedToken(); }
    const data = await resp.json().catch(() => ({}));
    if (!resp.ok) { const err = new Error(data.message || String(resp.status)); err.data = data; err.status = resp.status; throw err; }
    return data;
  }

  // --- the live stream: fetch-based SSE (read as it arrives) --------------------------------
  let lastId = null;
  let streamId = null;
  let streamCtl = null;
  const recent = [];  // the newest events, replayed onto a view read while they arrived
  const RECENT = 5000;
  const idParts = (id) => { const i = (id || '').lastIndexOf('-'); return [id.slice(0, i), Number(id.slice(i + 1))]; };
  function newer(id, than) {
    if (!than) return true;
    const [b1, s1] = idParts(id); const [b2, s2] = idParts(than);
    return b1 !== b2 || s1 > s2;
  }
  function setOnline(ok) {
    net.hidden = ok;
    net.textContent = ok ? '' : t('web_reconnecting');
  }
  let streamGen = 0;  // one stream at a time: a newer runStream ends the older loop
  async function runStream() {
    const gen = ++streamGen;
    if (streamCtl) streamCtl.abort();
    let pause = 200;
    while (gen === streamGen) {
      streamCtl = new AbortController();
      try {
        const extra = { Accept: 'text/event-stream' };
        if (lastId) extra['Last-Event-ID'] = lastId;
        const resp = await fetch('/api/v1/events?screen=' + enc(screenName()),
          { headers: headers(extra), cache: 'no-store', signal: streamCtl.signal });
        if (resp.status === 401) { askCode(); return; }
        if (!resp.ok || !resp.body) throw new Error('stream ' + resp.status);
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done || gen !== streamGen) break;
          buf += value.replace(/\r\n?/g, '\n');
          let cut;
          while ((cut = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, cut); buf = buf.slice(cut + 2);
            let id = null; let type = 'message'; const data = [];
            for (const line of block.split('\n')) {
              if (!line || line[0] === ':') continue;
              const c = line.indexOf(':');
              const field = c < 0 ? line : line.slice(0, c);
              const val = c < 0 ? '' : line.slice(c + 1).replace(/^ /, '');
              if (field === 'id') id = val; else if (field === 'event') type = val; else if (field === 'data') data.push(val);
            }
            if (!data.length) continue;
            if (id) lastId = id;
            pause = 200;
            setOnline(true);
            onEvent(type, JSON.parse(data.join('\n')), id);
          }
        }
      } catch (err) {
        if (err instanceof NeedToken) return;
      }
      if (gen !== streamGen) return;
      setOnline(false);
      await new Promise((r) => setTimeout(r, pause));
      pause = Math.min(pause * 2, 3000);
    }
  }
  function onEvent(type, data, id) {
    if (type === 'stream') { streamId = data.stream_id; return; }
    const ev = { type, data, id };
    recent.push(ev);
    if (recent.length > RECENT) recent.splice(0, recent.length - RECENT);
    window.collie.events += 1;
    if (type === 'reset') { reload(); return; }
    if (view && view.live) view.live(ev);
  }
  function sendPresence() {
    if (streamId) api('/api/v1/presence', { stream_id: streamId, screen: screenName() }).catch(() => {});
  }

  // --- screens ---------------------------------------------------------------------------
  let view = null;  // {name, live(ev), since}
  let loadSeq = 0;
  function route() {
    const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
    if (parts[0] === 'a' && parts[1] !== undefined) {
      if (parts[2] === 'c' && parts[3] !== undefined) return { screen: 'chat', agent: parts[1], conv: parts[3] };
      if (parts[2] === 'new') return { screen: 'new', agent: parts[1] };
      return { screen: 'list', agent: parts[1] };
    }
    if (parts[0] === 'notifications') return { screen: 'notifications' };
    return { screen: 'dashboard' };
  }
  function screenName() {
    const r = route();
    if (r.screen === 'chat') return `chat:${r.agent}:${r.conv}`;
    if (r.screen === 'list') return `list:${r.agent}`;
    if (r.screen === 'new') return `new:${r.agent}`;
    return 'dashboard';
  }
  const hrefOf = {
    list: (agent) => `#/a/${enc(agent)}`,
    chat: (agent, conv) => `#/a/${enc(agent)}/c/${enc(conv)}`,
    new: (agent) => `#/a/${enc(agent)}/new`,
  };
  function top(title, backHref, ...extra) {
    return h('header', { class: 'top' },
      backHref ? h('a', { class: 'button back', href: backHref, 'aria-label': t('web_back'), text: '‹' }) : null,
      h('div', { class: 'grow' }, title), ...extra);
  }
  function show(...nodes) {
    app.replaceChildren(...nodes.flat().filter((n) => n !== null && n !== undefined && n !== false));
    window.collie.drawn += 1;
    window.collie.drawnAt = performance.now();  // for bench/web_bench.py
  }
  function failed(err, backHref) {
    if (err instanceof NeedToken) return;
    show(top(h('h1', { text: t('web_title') }), backHref),
      h('p', { class: 'warning', role: 'alert', text: err.data && err.data.message ? err.data.message : t('web_failed') }),
      h('p', {}, h('button', { onclick: reload, text: t('web_retry') })));
  }
  // Events that came while a view was read and are newer than it are applied after it.
  function replaySince(since) {
    for (const ev of recent) if (newer(ev.id, since) && view && view.live) view.live(ev, true);
  }
  let timer = null;
  function later(fn, ms) { clearTimeout(timer); timer = setTimeout(fn, ms || 80); }

  async function reload() {
    const seq = ++loadSeq;
    const r = route();
    closeMenu();
    try {
      if (r.screen === 'dashboard') await dashboard(seq);
      else if (r.screen === 'list') await list(seq, r.agent);
      else if (r.screen === 'chat') await chat(seq, r.agent, r.conv);
      else if (r.screen === 'notifications') notifications();
      else await newPage(seq, r.agent);
    } catch (err) {
      if (seq === loadSeq) failed(err, r.screen === 'dashboard' ? null : '#/');
    }
  }

  // Dashboard (D1–D10): sections in the API's order; any section with rows is drawn as agent
  // rows, any with spaces as spaces, so new kinds of section (a crew's) draw too.
  async function dashboard(seq) {
    const pending = store.getItem('collie-pending-only') === '1';
    const mark = lastId;
    const data = await api('/api/v1/dashboard' + (pending ? '?pending_only=true' : ''));
    if (seq !== loadSeq) return;
    const toggle = h('input', { type: 'checkbox', id: 'pending-only', role: 'switch', checked: pending,
      onchange: (e) => { store.setItem('collie-pending-only', e.target.checked ? '1' : '0'); reload(); } });
    // A spaces section with no space (no --space) keeps its place (D7) but draws nothing.
    const drawn = data.sections.filter((sec) => sec.rows || (sec.spaces && sec.spaces.length));
    const sections = drawn.map((sec, i) => {
      const title = sec.title || (sec.spaces ? t('web_spaces') : '');
      const hid = 'sec-' + i;
      const body = sec.rows ? h('ul', { class: 'rows' }, sec.rows.map(agentRow))
        : h('ul', { class: 'rows' }, (sec.spaces || []).map((sp) => h('li', { class: 'space', text: sp.name })));
      return h('section', { 'aria-labelledby': hid, 'data-kind': sec.kind }, h('h2', { id: hid, text: title }), body);
    });
    const notify = h('a', { class: 'button', href: '#/notifications', text: t('web_push_health') });
    show(top(h('h1', { text: t('web_title') }), null, notify),
      h('label', { class: 'setting', for: 'pending-only' }, toggle, t('setting_pending_only')),
      ...sections);
    view = { name: 'dashboard', live: (ev) => { if (ev.type === 'dashboard.row' || ev.type === 'list.reset') later(reload); } };
    replaySince(mark);
  }
  // Notifications: turn Web Push on for this browser; each provider's health.
  function notifications() {
    const status = h('p', { class: 'line2', id: 'notify-status', role: 'status' });
    const lines = h('ul', { class: 'rows', id: 'push-health' });
    const button = window.colliePush && 'PushManager' in window
      ? h('button', { type: 'button', id: 'notify', text: t('web_notify'), onclick: async () => {
        try {
          await window.colliePush.subscribe(headers());
          status.textContent = t('web_notify_on');
          healthLines(lines);
        } catch (err) {
          status.textContent = t(err && err.message === 'denied' ? 'web_notify_denied' : 'web_notify_failed');
        }
        announce(status.textContent);
      } })
      : null;
    healthLines(lines);
    show(top(h('h1', { text: t('web_push_health') }), '#/'), button, status, lines);
    view = { name: 'notifications', live: () => {} };
  }
  async function healthLines(el) {
    const data = await api('/api/v1/push/health').catch(() => null);
    if (!data) return;
    const when = (mark) => new Date(mark.at).toLocaleString();
    el.replaceChildren(...data.providers.filter((p) => p.ok !== null).map((p) => {
      const provider = t('web_provider_' + p.provider);
      const text = p.ok ? t('web_push_ok', { provider, at: when(p.last_success) })
        : t('web_push_failing', { provider, at: when(p.last_failure), reason: p.last_failure.reason || '' });
      return h('li', { class: p.ok ? 'space' : 'space attention', 'data-provider': p.provider, text });
    }));
  }
  function agentRow(row) {
    const r = row.right || {};
    const right = r.label ? h('span', { class: 'state-label', text: r.label })
      : [h('span', { class: 'count', 'data-count': 'open', text: t('web_count_open', { n: r.open ?? 0 }) }),
        r.waiting ? h('span', { class: 'count attention', 'data-count': 'waiting', text: t('web_count_waiting', { n: r.waiting }) }) : null];
    return h('li', { 'data-agent': row.agent },
      h('a', { class: 'row', href: hrefOf.list(row.agent) },
        h('div', { class: 'grow' },
          h('div', { class: 'line1' }, h('span', { class: 'name', text: row.line1 }), h('span', { class: 'badge', text: row.badge })),
          h('div', { class: 'line2', text: row.line2 })),
        h('div', { class: 'right' }, right)));
  }

  // An agent's list (L1–L8): open rows, then "Closed", then the footer; above them, the
  // agent's home header's reason when its link is down (D6), read again when its state changes.
  async function list(seq, agent, polled) {
    const mark = lastId;
    const kept = polled && view && view.name === 'list' && view.agent === agent && !view.stale ? view.home : undefined;
    const data = await api(`/api/v1/agents/${enc(agent)}/conversations` + (polled ? '?poll=true' : ''));
    // Read after the list: a state change after it comes as a dashboard.row newer than the list.
    const home = kept !== undefined ? kept : await api(`/api/v1/agents/${enc(agent)}`).catch((err) => {
      if (err instanceof NeedToken) throw err;
      return null;
    });
    if (seq !== loadSeq) return;
    drawList(agent, data, home);
    const v = view = {
      name: 'list',
      agent,
      home,
      stale: false,
      since: data.event_id,
      live: (ev) => {
        if (ev.data.agent !== agent || !newer(ev.id, view.since)) return;
        if (ev.type === 'list.changed') { view.since = ev.id; drawList(agent, ev.data, view.home); }
        else if (ev.type === 'dashboard.row') {
          if (!ev.data.machine && (!view.home || ev.data.state !== view.home.state)) { view.stale = true; later(() => listAgain(agent)); }
        } else if (ev.type === 'list.row' || ev.type === 'list.removed' || ev.type === 'list.reset') later(() => listAgain(agent));
      },
    };
    if (home && home.reason) recheckHome(v, agent);
    replaySince(data.event_id || mark);
  }
  // A reason can change while the state stays (no row event says so): read it again while shown.
  function recheckHome(v, agent) {
    setTimeout(async () => {
      if (view !== v) return;
      const now = await api(`/api/v1/agents/${enc(agent)}`).catch(() => null);
      if (view !== v) return;
      if (now && (now.state !== v.home.state || now.reason !== v.home.reason)) { v.stale = true; listAgain(agent); }
      else recheckHome(v, agent);
    }, 3000);
  }
  async function listAgain(agent) {
    // Due after the person left the list (a redraw timed just before a tap): not theirs now.
    const r = route();
    if (r.screen !== 'list' || r.agent !== agent) return;
    const seq = ++loadSeq;
    try { await list(seq, agent, true); } catch (err) { /* L8: the list drawn stays */ }
  }
  function drawList(agent, data, home) {
    const rows = h('ul', { class: 'rows', 'aria-label': agent }, data.rows.map((r) => convRow(agent, r)));
    const closed = data.closed ? [h('h2', { id: 'closed-h', text: data.closed_label }),
      h('ul', { class: 'rows', id: 'closed-rows', 'aria-labelledby': 'closed-h' }, data.closed.map((r) => convRow(agent, r)))] : [];
    const footer = h('div', { class: 'footer', id: 'footer' });
    const reason = home && home.reason;
    const state = reason && { starting: t('state_starting'), unreachable: t('state_unreachable'),
      version_mismatch: t('state_version_mismatch') }[home.state];  // D6's words
    // R5's box, or the link's reason, already says the footer's sentence: say it once.
    const said = [data.warning, reason].filter(Boolean);
    drawFooter(footer, agent, data.footer && said.includes(data.footer.text) ? null : data.footer);
    const again = focusMark();
    show(top(h('h1', { text: agent }), '#/',
      data.new ? h('a', { class: 'button', href: hrefOf.new(agent), text: t('new_title') }) : null),
    reason ? h('div', { class: 'warning link-state', id: 'link-state', role: 'status', 'data-state': home.state },
      state ? h('strong', { text: state }) : null, h('p', { text: reason })) : null,
    data.warning ? h('p', { class: 'warning', role: 'alert', text: data.warning }) : null,
    data.rows.length || data.closed ? null : h('p', { class: 'empty', text: t('web_empty_list') }),
    rows, ...closed, footer);
    again();
  }
  // A live redraw keeps the focus on the same link (by its href) or control (by its id).
  function focusMark() {
    const el = document.activeElement;
    if (!el || el === app || !app.contains(el)) return () => {};
    const href = el.getAttribute('href');
    const sel = href ? `[href="${CSS.escape(href)}"]` : el.id ? '#' + CSS.escape(el.id) : null;
    return () => { const same = sel && app.querySelector(sel); if (same) same.focus({ preventScroll: true }); };
  }
  function drawFooter(el, agent, footer) {
    el.replaceChildren();
    if (!footer) return;
    if (footer.kind === 'load_more' && footer.href) {
      el.append(h('button', { text: footer.text, onclick: async (e) => {
        e.target.disabled = true;
        try {
          const page = await api(footer.href);
          let ul = document.getElementById('closed-rows');
          if (!ul) { ul = h('ul', { class: 'rows', id: 'closed-rows' }); el.before(h('h2', { text: t('list_closed') }), ul); }
          ul.append(...page.rows.map((r) => convRow(agent, r)));
          drawFooter(el, agent, page.footer);
        } catch (err) { e.target.disabled = false; }
      } }));
    } else {
      el.append(h('p', { role: 'note', text: footer.text }));
    }
  }
  function convRow(agent, row) {
    const status = S['web_status_' + row.status] ?? row.status;
    return h('li', { 'data-conversation': row.conversation_id, class: row.reopen ? 'with-action' : null },
      h('a', { class: 'row', href: hrefOf.chat(agent, row.conversation_id) },
        h('span', { class: 'mark ' + row.status, role: 'img', 'aria-label': status }),
        h('div', { class: 'grow' },
          h('div', { class: 'line1' }, h('span', { class: 'name', text: row.title })),
          row.line ? h('div', { class: 'line2', text: row.line }) : null),
        h('div', { class: 'right' },
          row.open_asks ? h('span', { class: 'count attention', 'aria-label': t('web_count_waiting', { n: row.open_asks }), text: row.open_asks }) : null,
          h('span', { class: 'muted', text: row.time_label }))),
      row.reopen ? h('button', { class: 'row-action', text: row.reopen, onclick: () => command(agent, row.conversation_id, 'reopen', {}) }) : null);
  }

  // The New page (N1–N3).
  async function newPage(seq, agent) {
    const data = await api(`/api/v1/agents/${enc(agent)}/new`);
    if (seq !== loadSeq) return;
    const status = h('p', { class: 'status-line', role: 'status' });
    show(top(h('h1', { text: data.title }), hrefOf.list(agent)),
      data.empty ? h('p', { class: 'empty', text: data.empty }) : null,
      data.error ? h('p', { class: 'warning', role: 'alert', text: data.error }) : null,
      h('div', { class: 'starters' }, data.starters.map((s) => h('button', { 'data-starter': s.id, onclick: async (e) => {
        e.currentTarget.disabled = true;
        const res = await api(`/api/v1/agents/${enc(agent)}/conversations`, { request_id: newId(), starter: s.id }).catch(() => ({}));
        if (res.conversation_id) location.hash = hrefOf.chat(agent, res.conversation_id);
        else { status.textContent = res.message || t('web_failed'); e.target.disabled = false; }
      } }, h('span', { text: s.label }), s.description ? h('span', { class: 'secondary', text: s.description }) : null))),
      status);
    view = { name: 'new', live: () => {} };
  }

  // --- the chat (C, H, B, A) ------------------------------------------------------------------
  const drafts = new Map();  // per ask: what the person typed, picked, or armed
  const allCards = new Set();  // chats whose "Show N more" was tapped
  let chatState = null;
  async function chat(seq, agent, conv) {
    const key = agent + '\n' + conv;
    const mark = lastId;
    const data = await api(`/api/v1/agents/${enc(agent)}/conversations/${enc(conv)}` + (allCards.has(key) ? '?all_cards=true' : ''));
    if (seq !== loadSeq) return;
    const keepScroll = chatState && chatState.key === key && !nearBottom();
    const same = chatState && chatState.key === key ? chatState : null;
    chatState = { key, agent, conv, data, skew: data.now ? Date.parse(data.now) - Date.now() : 0, pending: same ? same.pending : new Map(),
      composerText: same ? same.composerText : undefined, status: same ? same.status : undefined };
    // A redraw of the same chat keeps what has the focus, and where the caret is.
    const active = same && document.activeElement;
    const focusId = active && active.id;
    const caret = active && typeof active.selectionStart === 'number' ? [active.selectionStart, active.selectionEnd] : null;
    drawChat(keepScroll);
    if (focusId) {
      const again = document.getElementById(focusId);
      if (again) { again.focus({ preventScroll: true }); if (caret && again.setSelectionRange) again.setSelectionRange(caret[0], caret[1]); }
    }
    view = { name: 'chat', since: data.event_id, live: (ev, replay) => chatEvent(ev, replay) };
    replaySince(data.event_id || mark);
  }
  const nearBottom = () => window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
  function chatAgain() {
    later(() => {
      const r = route();  // the person may have left the chat meanwhile
      if (r.screen !== 'chat' || r.agent !== chatState.agent || r.conv !== chatState.conv) return;
      const seq = ++loadSeq;
      chat(seq, chatState.agent, chatState.conv).catch(() => {});
    }, 60);
  }
  function chatEvent(ev, replay) {
    const st = chatState; const d = ev.data;
    if (!st || d.agent !== st.agent || !newer(ev.id, view.since)) return;
    if (d.conversation_id !== undefined && d.conversation_id !== st.conv) return;
    if (ev.type === 'chat.item') {
      const line = d.line || d.item;  // the chat's line, as GET of the chat draws it
      putLine(line);
      if (line.kind === 'user') dropEcho(line);
      drawDots();
    } else if (ev.type === 'chat.delta') {
      const line = st.data.lines.find((l) => l.id === d.item_id);
      if (!line || (line.html !== undefined && line.final !== false)) { if (!replay) chatAgain(); return; }
      line.text = (line.text || '') + d.text;
      // Markdown being written shows its render; the next one comes as a chat.item (C2).
      if (line.html !== undefined) return;
      const el = document.getElementById('line-' + d.item_id);
      const txt = el && el.querySelector('.text');
      if (txt) txt.textContent = line.text; else putLine(line);
      if (atBottom) scrollDown();
    } else if (ev.type === 'chat.changed') {
      Object.assign(st.data, { header: d.header, bar: d.bar, cards: allCards.has(st.key) ? st.data.cards : d.cards, dots: d.dots, turn: d.turn });
      if (allCards.has(st.key)) chatAgain();
      drawHeader(); drawCards(); drawBar(); drawDots();
    } else if (ev.type === 'chat.note' || ev.type === 'answer.settled' || ev.type === 'list.reset'
      || ev.type === 'chat.reload'  // read again after the agent's reset (wire §10 step 4)
      || (ev.type === 'list.removed' && d.conversation_id === st.conv)) {
      chatAgain();
    }
  }
  let atBottom = true;
  window.addEventListener('scroll', () => { atBottom = nearBottom(); }, { passive: true });
  const scrollDown = () => window.scrollTo(0, document.body.scrollHeight);

  function drawChat(keepScroll) {
    const st = chatState;
    const r = route();
    const menuBtn = h('button', { id: 'menu-button', 'aria-haspopup': 'menu', 'aria-expanded': 'false', 'aria-label': t('web_menu'), text: '⋯', onclick: toggleMenu });
    const hasMenu = st.data.menu && (st.data.menu.items.length || st.data.menu.reopen);
    show(
      top(h('div', { id: 'header' }), hrefOf.list(r.agent), hasMenu ? menuBtn : null),
      h('section', { class: 'thread', id: 'thread', role: 'log', 'aria-label': st.data.header.title }),
      h('div', { id: 'dots-slot' }),
      h('section', { class: 'cards', id: 'cards' }),
      h('footer', { class: 'bottom', id: 'bottom' }));
    drawHeader();
    const thread = document.getElementById('thread');
    thread.append(...st.data.lines.map(lineEl));
    for (const p of st.pending.values()) if (!st.data.lines.some((l) => l.request_id === p.request_id)) thread.append(lineEl(p));
    drawDots(); drawCards(); drawBar();
    if (!keepScroll) scrollDown();
  }
  function drawHeader() {
    const hd = chatState.data.header;
    const el = document.getElementById('header');
    if (!el) return;
    const kids = [h('div', { class: 'title-line' }, h('h1', { text: hd.title }), h('span', { class: 'badge', text: hd.badge }))];
    if (hd.line2) kids.push(h('div', { class: 'muted', id: 'line2', text: hd.line2 }));
    if (hd.percent !== undefined && hd.percent !== null) {
      const bar = h('span');
      bar.style.width = hd.percent + '%';
      kids.push(h('div', { class: 'progress', role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': 100, 'aria-valuenow': hd.percent, 'aria-label': hd.line2 }, bar));
    }
    el.replaceChildren(...kids);
  }
  function fmtTime(at) {
    try { return new Date(at).toLocaleTimeString(LANG, { hour: '2-digit', minute: '2-digit' }); } catch (e) { return ''; }
  }
  function lineEl(line) {
    const cls = ['item', line.kind, line.mine ? 'mine' : ''].join(' ');
    const kids = [];
    if (line.kind === 'markdown' && line.html !== undefined) {
      const md = h('div', { class: 'md' });
      md.innerHTML = line.html;  // the API renders Markdown with raw HTML off; CSP is 'self'
      for (const a of md.querySelectorAll('a')) { a.rel = 'noopener noreferrer'; a.target = '_blank'; }
      kids.push(md);
    } else if (line.kind === 'code') {
      kids.push(h('pre', { 'aria-label': line.language || null }, h('code', { text: line.text || '' })));
      if (line.language) kids.unshift(h('span', { class: 'muted', text: line.language }));
    } else if (line.kind === 'link') {
      kids.push(line.url ? h('a', { href: line.url, rel: 'noopener noreferrer', target: '_blank', text: line.label || line.url })
        : h('span', { text: line.label || '' }));
    } else if (line.kind === 'tool') {
      kids.push(h('div', {}, h('strong', { text: line.tool || '' }), ' ',
        h('span', { class: 'tool-status ' + (line.status || ''), text: line.status ? (S['web_tool_' + line.status] ?? line.status) : '' })));
      if (line.text) kids.push(h('div', { class: 'text', text: line.text }));
      if (line.output) kids.push(h('pre', {}, h('code', { text: line.output })));
    } else {
      if (line.kind === 'thinking') kids.push(h('span', { class: 'sr-only', text: t('web_thinking') + ': ' }));
      kids.push(h('span', { class: 'text', text: line.text || '' }));
    }
    const el = h('div', { class: cls, id: 'line-' + line.id, 'data-kind': line.kind, 'data-call-id': line.call_id }, kids);
    if (line.cursor) el.lastChild.classList.add('cursor'), el.setAttribute('aria-busy', 'true'), el.append(h('span', { class: 'sr-only', text: t('web_writing') }));
    if (line.clock) el.append(h('span', { class: 'clock', role: 'img', 'aria-label': t('web_sending') }));
    if (line.state_label) el.append(h('span', { class: 'state', text: line.state_label }));
    if (line.at && !line.cursor) el.append(h('time', { class: 'time', datetime: line.at, text: fmtTime(line.at) }));
    return el;
  }
  function putLine(line) {
    const st = chatState;
    const i = st.data.lines.findIndex((l) => l.id === line.id);
    if (i >= 0) st.data.lines[i] = line; else st.data.lines.push(line);
    const el = lineEl(line);
    const old = document.getElementById('line-' + line.id);
    const stick = atBottom;
    if (old) old.replaceWith(el);
    else {
      const thread = document.getElementById('thread');
      // The person's own pending lines stay last until their copy arrives.
      const firstPending = thread && thread.querySelector('[id^="line-pending:"]');
      if (firstPending && !line.id.startsWith('pending:')) firstPending.before(el); else if (thread) thread.append(el);
    }
    if (line.kind === 'tool' && st.data.cards.cards.some((c) => c.tool_call_id === line.call_id)) drawCards();
    if (stick) scrollDown();
  }
  function dropEcho(item) {
    const st = chatState;
    for (const [rid, p] of st.pending) {
      if ((item.request_id && item.request_id === rid) || (!item.request_id && item.text === p.text)) {
        st.pending.delete(rid);
        st.data.lines = st.data.lines.filter((l) => l.id !== p.id);
        const el = document.getElementById('line-' + p.id);
        if (el) el.remove();
        break;
      }
    }
    for (const l of st.data.lines.filter((x) => x.id.startsWith('pending:') && x.request_id === item.request_id)) {
      st.data.lines = st.data.lines.filter((x) => x !== l);
      const el = document.getElementById('line-' + l.id); if (el) el.remove();
    }
  }
  function drawDots() {
    const st = chatState; const slot = document.getElementById('dots-slot');
    if (!slot) return;
    const lines = st.data.lines.concat([...st.pending.values()].filter((p) => !st.data.lines.some((l) => l.id === p.id)));
    const newest = lines[lines.length - 1];
    const dots = !st.data.read_only && newest && newest.mine && [undefined, null, 'sending', 'sent'].includes(newest.state);
    slot.replaceChildren(dots ? h('div', { class: 'dots', role: 'img', 'aria-label': t('web_working') }, h('span'), h('span'), h('span')) : '');
  }

  // Cards (A1–A8, T1). What the person typed or armed survives a redraw.
  function drawCards() {
    const st = chatState; const el = document.getElementById('cards');
    if (!el) return;
    const focused = document.activeElement && document.activeElement.id;
    for (const old of document.querySelectorAll('#thread > article.card')) old.remove();
    el.replaceChildren();
    for (const card of st.data.cards.cards) {
      // A1: a card sits under the tool call it is about, else after the thread.
      const tool = card.tool_call_id && [...document.querySelectorAll('#thread > .item.tool')]
        .find((x) => x.dataset.callId === card.tool_call_id);
      if (tool) tool.after(cardEl(card)); else el.append(cardEl(card));
    }
    if (st.data.cards.more) {
      el.append(h('button', { class: 'more', 'data-more': st.data.cards.more.count, text: st.data.cards.more.label,
        onclick: () => { allCards.add(st.key); chatAgain(); } }));
    }
    tick();
    if (focused) { const again = document.getElementById(focused); if (again) again.focus(); }
  }
  function draft(card) {
    const k = card.ask_id + '@' + card.version;
    if (!drafts.has(k)) drafts.set(k, { text: '', picked: new Set(), fields: {}, armed: false, outcome: null });
    return drafts.get(k);
  }
  function cardEl(card) {
    const dr = draft(card);
    const cid = 'card-' + card.ask_id.replace(/[^\w-]/g, '_');
    const outcome = dr.outcome || card.outcome;
    const frozen = !card.answerable || (outcome && outcome.frozen);
    const box = h('article', { class: 'card', id: cid, 'data-ask': card.ask_id, 'aria-labelledby': cid + '-t' },
      h('div', { class: 'caption', text: card.caption }),
      h('h3', { id: cid + '-t', text: card.title }),
      card.deadline ? h('div', { class: 'muted deadline', 'data-deadline': card.deadline, text: card.deadline_label }) : null,
      card.text ? h('div', { class: 'text', text: card.text }) : null,
      callEl(cid, card.call),
      card.notices.map((n) => h('div', { class: 'notice', role: 'note', text: n })));
    const send = (answer) => answerAsk(card, answer);
    const body = card.body;
    if (body && body.kind === 'permission') {
      box.append(h('div', { class: 'choices', role: 'group', 'aria-labelledby': cid + '-t' }, body.buttons.map((b) => {
        const armed = b.role === 'always' && dr.armed;
        return h('button', { class: armed ? 'armed' : '', disabled: frozen, 'data-option': b.option_id, 'data-role': b.role,
          onclick: () => {
            if (b.role !== 'always') { send({ option: b.option_id }); return; }
            if (!dr.armed) { dr.armed = true; drawCards(); focusIn(cid, `[data-role="always"]`); announce(b.confirm_label + ' ' + (b.tool_name || '')); return; }
            send({ option: b.option_id, confirmed: true });
          } },
        h('span', { text: armed ? b.confirm_label : b.label }),
        armed ? h('span', { class: 'secondary', text: b.tool_name || '' })
          : (b.secondary ? h('span', { class: 'secondary', text: b.secondary }) : null));
      })));
    } else if (body && body.kind === 'choice') {
      if (body.multiple) box.append(h('div', { class: 'muted', id: cid + '-hint', text: body.hint }));
      box.append(h('div', { class: 'choices', role: 'group', 'aria-labelledby': cid + '-t', 'aria-describedby': body.multiple ? cid + '-hint' : null },
        body.rows.map((row) => h('button', { disabled: frozen, 'data-option': row.option_id,
          'aria-pressed': body.multiple ? String(dr.picked.has(row.option_id)) : null,
          onclick: () => {
            if (!body.multiple) { send({ option: row.option_id }); return; }
            if (dr.picked.has(row.option_id)) dr.picked.delete(row.option_id); else dr.picked.add(row.option_id);
            drawCards(); focusIn(cid, `[data-option="${CSS.escape(row.option_id)}"]`);
          } }, row.label))));
      if (body.multiple) {
        box.append(h('button', { class: 'primary send', disabled: frozen || !dr.picked.size,
          onclick: () => send({ options: body.rows.map((r) => r.option_id).filter((o) => dr.picked.has(o)) }), text: body.send }));
      }
    } else if (body && body.kind === 'text') {
      const id = cid + '-in';
      const counter = h('div', { class: 'muted counter', id: id + '-c', text: body.input.counter_template.replace('{n}', dr.text.length) });
      const input = h('input', { type: 'text', id, maxlength: body.input.limit, value: dr.text, disabled: frozen,
        'aria-labelledby': cid + '-t', 'aria-describedby': id + '-c',
        oninput: (e) => { dr.text = e.target.value; counter.textContent = body.input.counter_template.replace('{n}', dr.text.length); sendBtn.disabled = !dr.text.trim(); },
        onkeydown: (e) => { if (e.key === 'Enter' && dr.text.trim()) send({ text: dr.text }); } });
      const sendBtn = h('button', { class: 'primary send', disabled: frozen || !dr.text.trim(), text: body.send, onclick: () => send({ text: dr.text }) });
      box.append(input, counter, sendBtn);
    } else if (body && body.kind === 'form') {
      box.append(...body.fields.map((f) => fieldEl(cid, f, dr, frozen)));
      const missing = body.fields.some((f) => f.required && (dr.fields[f.field_id] === undefined || dr.fields[f.field_id] === ''));
      box.append(h('button', { class: 'primary send', disabled: frozen || missing, text: body.send, onclick: () => {
        const fields = {};
        for (const f of body.fields) {
          const v = dr.fields[f.field_id];
          if (f.kind === 'switch') fields[f.field_id] = Boolean(v);
          else if (v !== undefined && v !== '') fields[f.field_id] = v;
        }
        send({ fields });
      } }));
    }
    if (outcome && outcome.line) {
      box.append(h('p', { class: 'outcome' + (outcome.outcome === 'refused' ? ' bad' : ''), role: 'status', text: outcome.line }));
      if (outcome.retry_label) {
        box.append(h('button', { class: 'retry', text: outcome.retry_label, onclick: () => retryTap(card, outcome.request_id) }));
      }
    }
    return box;
  }
  // S1: what the call will use (each argument with its origin), why it waits, verbatim, and
  // the irreversible warning: the API's words, drawn as they come (masked there, X1).
  function callEl(cid, call) {
    if (!call) return null;
    const args = call.arguments.length ? [h('h4', { text: call.arguments_title }),
      h('dl', { class: 'arguments' }, call.arguments.map((a) => h('div', { class: 'argument' },
        h('dt', { text: a.name }),
        h('dd', { class: 'value' }, h('code', { text: a.value })),
        a.origin_label || a.origin ? h('dd', { class: 'origin', 'data-origin': a.origin, text: a.origin_label || a.origin }) : null)))] : [];
    const reasons = call.reasons.length ? [h('h4', { text: call.reasons_title }),
      h('ul', { class: 'reasons' }, call.reasons.map((r) => h('li', { text: r })))] : [];
    const undo = call.irreversible ? h('p', { class: 'irreversible', role: 'note', text: call.irreversible }) : null;
    if (!args.length && !reasons.length && !undo) return null;
    return h('div', { class: 'call', id: cid + '-call' }, args, reasons, undo);
  }
  function fieldEl(cid, f, dr, frozen) {
    const id = cid + '-' + f.field_id.replace(/[^\w-]/g, '_');
    const label = h('label', { for: id }, f.label, f.required_label ? h('span', { class: 'req', text: f.required_label }) : null);
    const redrawSend = () => {
      const card = document.getElementById(cid); const btn = card && card.querySelector('.send');
      if (!btn || frozen) return;
      btn.disabled = [...card.querySelectorAll('[data-required]')].some((x) => !(x.type === 'checkbox' ? true : x.value));
    };
    if (f.kind === 'switch') {
      return h('div', { class: 'field switch' }, h('input', { type: 'checkbox', role: 'switch', id, disabled: frozen, checked: Boolean(dr.fields[f.field_id]),
        onchange: (e) => { dr.fields[f.field_id] = e.target.checked; } }), label);
    }
    if (f.kind === 'select') {
      const sel = h('select', { id, disabled: frozen, 'data-required': f.required || null, onchange: (e) => { dr.fields[f.field_id] = e.target.value; redrawSend(); } },
        h('option', { value: '', text: t('web_choose') }), f.options.map((o) => h('option', { value: o.option_id, selected: dr.fields[f.field_id] === o.option_id, text: o.label })));
      return h('div', { class: 'field' }, label, sel);
    }
    const tpl = f.input ? f.input.counter_template : '{n}';
    const value = dr.fields[f.field_id] || '';
    const counter = h('div', { class: 'muted counter', id: id + '-c', text: tpl.replace('{n}', value.length) });
    return h('div', { class: 'field' }, label, h('input', { type: 'text', id, value, maxlength: f.input ? f.input.limit : null, disabled: frozen,
      'data-required': f.required || null, 'aria-describedby': id + '-c',
      oninput: (e) => { dr.fields[f.field_id] = e.target.value; counter.textContent = tpl.replace('{n}', e.target.value.length); redrawSend(); } }), counter);
  }
  function focusIn(cid, sel) { const c = document.getElementById(cid); const b = c && c.querySelector(sel); if (b) b.focus(); }

  // T1: one request id per tap; Retry sends the same one (kept across a reload).
  const taps = JSON.parse(store.getItem('collie-taps') || '{}');
  function keepTap(rid, tap) {
    taps[rid] = tap;
    const ids = Object.keys(taps);
    for (const old of ids.slice(0, Math.max(0, ids.length - 50))) delete taps[old];
    store.setItem('collie-taps', JSON.stringify(taps));
  }
  function answerAsk(card, answer) {
    const rid = newId();
    const tap = { agent: chatState.agent, ask: card.ask_id, body: { request_id: rid, version: card.version, answer } };
    keepTap(rid, tap);
    return postTap(card, tap);
  }
  function retryTap(card, rid) {
    const tap = taps[rid];
    if (tap) return postTap(card, tap);
    return api('/api/v1/answers/' + enc(rid)).then((res) => showOutcome(card, res)).catch(() => {});
  }
  async function postTap(card, tap) {
    const dr = draft(card);
    dr.outcome = { outcome: 'sending', request_id: tap.body.request_id, line: null, closed: false, frozen: true };
    drawCards();
    let res;
    try {
      res = await api(`/api/v1/agents/${enc(tap.agent)}/asks/${enc(tap.ask)}/answer`, tap.body);
    } catch (err) {
      if (err instanceof NeedToken) return;
      res = err.data && err.data.card ? err.data : { outcome: 'uncertain', card: { outcome: 'uncertain', request_id: tap.body.request_id, line: t('t_uncertain'), closed: false, frozen: true, retry_label: t('t_retry') } };
    }
    showOutcome(card, res);
  }
  function showOutcome(card, res) {
    const dr = draft(card);
    dr.outcome = res.card;
    if (res.outcome === 'changed') dr.armed = false;
    const st = chatState;
    if (res.card && res.card.closed) {
      st.data.cards.cards = st.data.cards.cards.filter((c) => c.ask_id !== card.ask_id);
    }
    drawCards();
    if (res.card && res.card.line) announce(res.card.line);
    if (res.outcome === 'changed') chatAgain();
  }

  // A3: the countdown ticks from the gateway's clock.
  function tick() {
    const now = Date.now() + (chatState ? chatState.skew : 0);
    for (const el of document.querySelectorAll('[data-deadline]')) {
      const left = (Date.parse(el.dataset.deadline) - now) / 1000;
      el.textContent = left <= 0 ? t('expired') : left < 60 ? t('expires_in_s', { n: Math.max(1, Math.floor(left)) })
        : t('expires_in_min', { n: Math.floor(left / 60) });
    }
  }
  setInterval(tick, 1000);

  // The bottom bar (B1–B3) and the composer (C4).
  function drawBar() {
    const st = chatState; const el = document.getElementById('bottom');
    if (!el) return;
    const focused = document.activeElement && document.activeElement.id;
    const kids = [];
    if (st.data.read_only) {
      if (st.data.menu && st.data.menu.reopen) kids.push(h('button', { id: 'reopen', class: 'primary', text: st.data.menu.reopen.label, onclick: () => command(st.agent, st.conv, 'reopen', {}) }));
    } else {
      const controls = (st.data.bar && st.data.bar.controls) || [];
      if (controls.length) {
        kids.push(h('div', { class: 'bar', role: 'toolbar', 'aria-label': t('web_menu') }, controls.map((c) => h('button', {
          id: 'bar-' + (c.button_id ? 'b-' + c.button_id : c.kind), 'data-control': c.kind, class: c.dimmed ? 'dimmed' : '',
          'aria-disabled': c.tappable ? null : 'true', 'aria-busy': c.busy ? 'true' : null,
          onclick: () => { if (c.tappable) control(c); } },
        c.busy ? h('span', { class: 'spinner', 'aria-hidden': 'true' }) : null,
        c.icon ? h('span', { class: 'icon', 'aria-hidden': 'true', text: ICONS[c.icon] || '' }) : null,
        c.label))));
      }
      const box = h('textarea', { id: 'composer', rows: 1, 'aria-label': t('web_placeholder'), placeholder: t('web_placeholder'),
        onkeydown: (e) => { if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); sendMessage(false); } } });
      box.value = st.composerText !== undefined ? st.composerText : (st.data.composer && st.data.composer.text) || '';
      box.addEventListener('input', () => { st.composerText = box.value; });
      kids.push(h('div', { class: 'composer' }, box, h('button', { id: 'send', class: 'primary', text: t('send'), onclick: () => sendMessage(false) })));
    }
    const status = st.status || (st.data.composer && st.data.composer.status) || '';
    kids.push(h('div', { class: 'status-line', id: 'bar-status', role: 'status', text: status }));
    el.replaceChildren(...kids);
    if (focused) { const again = document.getElementById(focused); if (again) again.focus(); }
  }
  const ICONS = { play: '▶', pause: '⏸', check: '✓', x: '✕', refresh: '↻', archive: '▤', flag: '⚑', star: '★', send: '➤', note: '✎', search: '⌕', more: '⋯' };
  function setStatus(text) { chatState.status = text; const el = document.getElementById('bar-status'); if (el) el.textContent = text; }
  async function control(c) {
    const st = chatState;
    if (c.kind === 'steer') { sendMessage(true, c.turn); return; }
    const path = c.kind === 'stop' ? 'stop' : 'buttons/' + enc(c.button_id);
    const res = await command(st.agent, st.conv, path, { turn: c.turn });
    setStatus(res && res.outcome !== 'accepted' ? (res.message || '') : '');
  }
  async function command(agent, conv, path, body) {
    try {
      const res = await api(`/api/v1/agents/${enc(agent)}/conversations/${enc(conv)}/${path}`, Object.assign({ request_id: newId() }, body));
      if ((path === 'reopen' || path === 'close') && res.outcome === 'accepted') reload();
      else if (res.message) announce(res.message);
      return res;
    } catch (err) { return null; }
  }
  async function sendMessage(steer, turn) {
    const st = chatState;
    const box = document.getElementById('composer');
    const text = box ? box.value : '';
    if (!text.trim()) { if (box) box.focus(); return; }
    // C4: Send again on a line not confirmed retries with the same request id.
    const again = [...st.pending.values()].find((p) => p.state === 'not_confirmed' && p.text === text);
    const rid = again ? again.request_id : newId();
    const line = { kind: 'user', id: 'pending:' + rid, text, mine: true, clock: true, state: 'sending', request_id: rid };
    st.pending.set(rid, line);
    st.composerText = '';
    st.status = '';
    box.value = '';
    putLine(line); drawDots(); drawBar();
    let res;
    try {
      const body = { request_id: rid, text, steer };
      if (steer) body.turn = turn;
      res = await api(`/api/v1/agents/${enc(st.agent)}/conversations/${enc(st.conv)}/messages`, body);
    } catch (err) {
      if (err instanceof NeedToken) return;
      res = { line_state: 'not_confirmed', label: t('chat_not_confirmed') };
    }
    if (chatState !== st) return;
    if (!st.pending.has(rid)) return;  // echoed already
    line.state = res.line_state;
    line.clock = res.line_state === 'sending' || res.line_state === 'sent';
    line.state_label = res.line_state === 'sent' ? undefined : res.label;
    if (res.line_state === 'not_sent') st.composerText = res.composer_text || text;
    if (res.line_state === 'sent') st.status = res.label || '';
    else if (res.message) st.status = res.message;
    putLine(line);  // C4: "Not sent" stays on the line; its text is back in the composer
    if (res.line_state === 'not_sent') announce(res.label || '');
    drawDots(); drawBar();
  }

  // The conversation menu (G2): close, reopen.
  function toggleMenu() {
    if (document.getElementById('menu')) { closeMenu(); return; }
    const st = chatState; const m = st.data.menu;
    const items = m.items.concat(m.reopen ? [m.reopen] : []);
    const menu = h('div', { class: 'menu', id: 'menu', role: 'menu', 'aria-labelledby': 'menu-button',
      onkeydown: (e) => { if (e.key === 'Escape') { closeMenu(); document.getElementById('menu-button').focus(); } } },
    items.map((it) => h('button', { role: 'menuitem', 'data-action': it.action, text: it.label,
      onclick: () => { closeMenu(); command(st.agent, st.conv, it.action, {}); } })));
    document.querySelector('.top').append(menu);
    document.getElementById('menu-button').setAttribute('aria-expanded', 'true');
    menu.querySelector('button').focus();
  }
  function closeMenu() {
    const m = document.getElementById('menu'); if (m) m.remove();
    const b = document.getElementById('menu-button'); if (b) b.setAttribute('aria-expanded', 'false');
  }

  // --- pairing: a page without a credential asks for a code (collie-gateway pair) -----------
  let asking = false;
  // After a refused code the box keeps it, selected: one mistyped character is one keystroke.
  function askCode(problem, typed) {
    if (asking && !problem) return;
    asking = true;
    streamGen += 1;  // no stream without a credential: the loop ends, and says nothing
    if (streamCtl) streamCtl.abort();
    setOnline(true);
    const input = h('input', { type: 'text', id: 'code', autocomplete: 'one-time-code', spellcheck: 'false', autocapitalize: 'off',
      value: typed || '', 'aria-invalid': problem ? 'true' : null, 'aria-describedby': problem ? 'code-problem' : null });
    const send = h('button', { class: 'primary', type: 'submit', text: t('web_pair_save') });
    show(top(h('h1', { text: t('web_title') })), h('form', { class: 'token', onsubmit: async (e) => {
      e.preventDefault();
      send.disabled = true;
      let resp = null;
      try {
        resp = await fetch('/api/v1/pair', { method: 'POST', cache: 'no-store',
          headers: headers({ 'Content-Type': 'application/json' }),
          body: JSON.stringify({ code: input.value.trim(), name: t('web_pair_name'), session: true }) });
      } catch (err) { askCode(t('web_failed'), input.value); return; }
      if (!resp.ok) { const data = await resp.json().catch(() => ({})); askCode(data.message || t('web_failed'), input.value); return; }
      asking = false;
      start();
    } }, h('h2', { text: t('web_pair_title') }), problem ? h('p', { class: 'error', id: 'code-problem', role: 'alert', text: problem }) : null,
    h('p', { text: t('web_pair_hint') }),
    h('label', { for: 'code', text: t('web_pair_label') }), input, send));
    view = null;
    input.focus();
    if (typed) input.select();
  }

  // --- start ---------------------------------------------------------------------------------
  window.collie = { drawn: 0, drawnAt: 0, events: 0, get lastEventId() { return lastId; }, get streamId() { return streamId; } };
  let started = false;
  function start() {
    reload();
    runStream();
    if (started) return;
    started = true;
    window.addEventListener('hashchange', () => { reload(); sendPresence(); app.focus({ preventScroll: true }); });
    setInterval(() => { if (route().screen === 'chat') sendPresence(); }, 25000);
    document.addEventListener('click', (e) => { const m = document.getElementById('menu'); if (m && !m.contains(e.target) && e.target.id !== 'menu-button') closeMenu(); });
  }
  document.title = t('web_title');
  app.replaceChildren(h('p', { class: 'empty', role: 'status', text: t('web_loading') }));
  start();
})();
