// The web companion's Web Push subscription: registers the service worker, asks
// the browser for a subscription with the gateway's VAPID key, and registers it as a
// "webpush" device. Exposed as window.colliePush.subscribe(headers) -> device id.
'use strict';
(() => {
  function keyBytes(b64url) {
    const b64 = b64url.replace(/-/g, '+').replace(/_/g, '/');
    const raw = atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4));
    return Uint8Array.from(raw, (c) => c.charCodeAt(0));
  }
  async function json(resp) {
    const data = await resp.json().catch(() => ({}));
    if (!resp.ok) { const err = new Error(data.message || String(resp.status)); err.status = resp.status; throw err; }
    return data;
  }
  async function subscribe(headers) {
    if (!('serviceWorker' in navigator) || !('PushManager' in window)) throw new Error('unsupported');
    if ((await Notification.requestPermission()) !== 'granted') throw new Error('denied');
    const reg = await navigator.serviceWorker.register('/web/sw.js');
    const { public_key: key } = await json(await fetch('/api/v1/push/vapid', { headers, cache: 'no-store' }));
    let sub = await reg.pushManager.getSubscription();
    if (sub && sub.options.applicationServerKey) {
      const had = new Uint8Array(sub.options.applicationServerKey);
      const want = keyBytes(key);
      if (had.length !== want.length || had.some((b, i) => b !== want[i])) { await sub.unsubscribe(); sub = null; }
    }
    sub = sub || await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(key) });
    const body = Object.assign({ provider: 'webpush' }, sub.toJSON());
    delete body.expirationTime;
    const resp = await fetch('/api/v1/devices', {
      method: 'POST', headers: Object.assign({ 'Content-Type': 'application/json' }, headers), body: JSON.stringify(body),
    });
    return (await json(resp)).device_id;
  }
  window.colliePush = { subscribe };
})();
