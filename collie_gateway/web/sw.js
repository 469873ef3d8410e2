// The web companion's service worker: shows each Web Push as a notification,
// opens the chat on a tap, and closes a notification when its ask is withdrawn (answered
// anywhere, decided or expired). The gateway's payload: {"v":1,"type":"ask"|"many"|
// "private"|"withdraw","tag",...}; the words come from the gateway's catalogue.
'use strict';

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

function message(event) {
  try { return event.data ? event.data.json() : null; } catch (err) { return null; }
}

function chatUrl(data) {
  const enc = encodeURIComponent;
  if (data && data.agent && data.conversation) return `/#/a/${enc(data.agent)}/c/${enc(data.conversation)}`;
  if (data && data.agent) return `/#/a/${enc(data.agent)}`;
  return '/';
}

async function withdraw(msg) {
  const shown = await self.registration.getNotifications({ tag: msg.tag });
  for (const note of shown) {
    // The tag is the pane's: close it only if it still shows this ask (a newer ask in the
    // same pane replaced it otherwise). A private notification names no ask: its tag does.
    const ask = note.data && note.data.ask;
    if (!msg.ask || !ask || ask === msg.ask) note.close();
  }
}

async function show(msg) {
  const data = { type: msg.type, machine: msg.machine, agent: msg.agent,
    conversation: msg.conversation, ask: msg.ask };
  await self.registration.showNotification(String(msg.title || ''), {
    body: msg.body ? String(msg.body) : '',
    tag: msg.tag,
    data,
    icon: '/web/icon.svg',
  });
}

self.addEventListener('push', (event) => {
  const msg = message(event);
  if (!msg || msg.v !== 1 || typeof msg.tag !== 'string') return;
  event.waitUntil(msg.type === 'withdraw' ? withdraw(msg) : show(msg));
});

self.addEventListener('notificationclick', (event) => {
  event.notification.close();
  const url = chatUrl(event.notification.data);
  event.waitUntil((async () => {
    const open = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
    for (const client of open) {
      if (new URL(client.url).origin === self.location.origin && 'focus' in client) {
        await client.navigate(url).catch(() => null);
        return client.focus();
      }
    }
    return self.clients.openWindow(url);
  })());
});
