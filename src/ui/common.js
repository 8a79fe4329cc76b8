// What every Sluice page shares: the settings the server put in the page,
// the tenant box, calls of the HTTP API, times and durations as
// Prometheus' UI writes them, and DOM and label formatting.
'use strict';

window.Sluice = (function () {
  const settings = JSON.parse(document.getElementById('settings').textContent);
  const tenantListeners = [];
  // ---- the tenant, sent in the tenant header on every request ----
  const tenantInput = document.getElementById('tenant');
  let tenant = '';
  if (settings.multitenant) {
    tenant = localStorage.getItem('sluice.tenant') || '';
    tenantInput.value = tenant;
    tenantInput.addEventListener('change', () => {
      tenant = tenantInput.value.trim();
      localStorage.setItem('sluice.tenant', tenant);
      tenantListeners.forEach((f) => f());
    });
  }
  function requestHeaders() {
    const h = {};
    if (settings.multitenant && tenant) h[settings.tenantHeader] = tenant;
    return h;
  }

  // Parameters as a form; a list is the parameter repeated.
  function encode(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) {
      if (Array.isArray(v)) v.forEach((x) => q.append(k, x));
      else if (v !== undefined && v !== null) q.append(k, String(v));
    }
    return q;
  }
  // The envelope of an answer, or an Error carrying the server's message
  // (a reply that is not JSON, such as the tenant door's, included).
  async function envelope(resp) {
    const text = await resp.text();
    let json;
    try {
      json = JSON.parse(text);
    } catch (e) {
      throw new Error('HTTP ' + resp.status + ': ' + text.trim());
    }
    if (json.status !== 'success') {
      const err = new Error(json.error || ('HTTP ' + resp.status));
      err.errorType = json.errorType;
      throw err;
    }
    return json;
  }
  // One call of the HTTP API, POSTed as a form (long queries fit).
  async function api(path, params) {
    return envelope(await fetch('/api/v1/' + path, {
      method: 'POST',
      headers: Object.assign({ 'Content-Type': 'application/x-www-form-urlencoded' }, requestHeaders()),
      body: encode(params),
      cache: 'no-store',
    }));
  }
  // One GET of the HTTP API, for the endpoints that take no POST.
  async function apiGet(path, params) {
    const q = String(encode(params));
    return envelope(await fetch('/api/v1/' + path + (q ? '?' + q : ''), { headers: requestHeaders(), cache: 'no-store' }));
  }

  // ---- durations and times, as Prometheus' UI writes them ----
  const UNITS = [['y', 31536000000], ['w', 604800000], ['d', 86400000], ['h', 3600000], ['m', 60000], ['s', 1000], ['ms', 1]];
  function parseDuration(s) {
    s = (s || '').trim();
    if (s === '0') return 0;
    const m = /^(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?$/.exec(s);
    if (!m || s === '') return null;
    let ms = 0;
    UNITS.forEach(([, size], i) => { if (m[2 + 2 * i]) ms += parseInt(m[2 + 2 * i], 10) * size; });
    return ms;
  }
  function formatDuration(ms) {
    if (!ms) return '0s';
    let out = '';
    for (const [u, size] of UNITS) {
      if (u === 'y' || u === 'w') {
        if (ms >= size && ms % size === 0) { out += ms / size + u; ms = 0; }
      } else if (ms >= size) {
        out += Math.floor(ms / size) + u;
        ms %= size;
      }
    }
    return out;
  }
  const pad = (n, w) => String(n).padStart(w || 2, '0');
  function formatTime(ms) {
    const d = new Date(ms);
    return d.getUTCFullYear() + '-' + pad(d.getUTCMonth() + 1) + '-' + pad(d.getUTCDate()) + ' ' +
      pad(d.getUTCHours()) + ':' + pad(d.getUTCMinutes()) + ':' + pad(d.getUTCSeconds());
  }
  function parseTime(s) {
    s = (s || '').trim();
    if (s === '') return null;
    if (/^[0-9]+(\.[0-9]+)?$/.test(s)) return Math.round(parseFloat(s) * 1000);
    const m = /^(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2})(?::(\d{2}))?)?/.exec(s);
    if (!m) return null;
    return Date.UTC(+m[1], +m[2] - 1, +m[3], +(m[4] || 0), +(m[5] || 0), +(m[6] || 0));
  }
  // ---- formatting ----
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else if (v !== false && v !== null && v !== undefined) e.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c);
    return e;
  }
  function labelText(metric) {
    const name = metric.__name__ || '';
    const rest = Object.keys(metric).filter((k) => k !== '__name__').sort().map((k) => k + '=' + JSON.stringify(metric[k]));
    return name + (rest.length || !name ? '{' + rest.join(', ') + '}' : '');
  }
  function labelNode(metric) {
    const span = el('span', { class: 'labels' });
    const name = metric.__name__ || '';
    if (name) span.append(name);
    const keys = Object.keys(metric).filter((k) => k !== '__name__').sort();
    if (keys.length || !name) {
      span.append('{');
      keys.forEach((k, i) => {
        if (i) span.append(', ');
        span.append(el('span', { class: 'name' }, k), '=', el('span', { class: 'lv' }, JSON.stringify(metric[k])));
      });
      span.append('}');
    }
    return span;
  }
  function formatNumber(v) {
    if (!isFinite(v)) return String(v);
    const a = Math.abs(v);
    if (a === 0) return '0';
    if (a >= 1e15 || a < 1e-3) return v.toExponential(2);
    const units = [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']];
    for (const [size, u] of units) if (a >= size) return +(v / size).toPrecision(3) + u;
    return String(+v.toPrecision(4));
  }
  function formatBytes(n) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + ' ' + units[i];
  }

  return {
    settings, api, apiGet, parseDuration, formatDuration, formatTime, parseTime, el, labelText,
    labelNode, formatNumber, formatBytes, onTenantChange: (f) => tenantListeners.push(f),
  };
}());
