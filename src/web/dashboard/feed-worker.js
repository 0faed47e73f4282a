// Gantry's dashboard, the feeds shared between a browser's tabs: a
// SharedWorker holding one EventSource per feed URL however many tabs
// follow it, and handing each event to every tab that follows. A browser
// opens at most six HTTP/1.1 connections to one host; with a stream per
// tab, a seventh Gantry tab would wait for ever. A tab says `follow` (a
// URL) and `leave` (when it goes); the stream closes with its last tab.
"use strict";

// url -> { source: EventSource, ports: Set<MessagePort>, last: message }
const feeds = new Map();

function send(feed, message) {
  feed.last = message.type === "message" ? message : feed.last;
  for (const port of feed.ports) port.postMessage(message);
}

function follow(port, url) {
  let feed = feeds.get(url);
  if (!feed) {
    const source = new EventSource(url);
    feed = { source, ports: new Set(), last: null, open: false };
    feeds.set(url, feed);
    const f = feed;
    source.onopen = () => { f.open = true; send(f, { url, type: "open" }); };
    source.onerror = () => { f.open = false; send(f, { url, type: "error" }); };
    source.onmessage = (m) => send(f, { url, type: "message", data: m.data });
    source.addEventListener("problem", (m) => send(f, { url, type: "problem", data: m.data }));
  }
  feed.ports.add(port);
  // A tab that joins a stream already open gets where it stands at once.
  if (feed.open) port.postMessage({ url, type: "open" });
  if (feed.last) port.postMessage(feed.last);
}

function leave(port, url) {
  for (const [key, feed] of feeds) {
    if (url !== undefined && key !== url) continue;
    feed.ports.delete(port);
    if (!feed.ports.size) {
      feed.source.close();
      feeds.delete(key);
    }
  }
}

onconnect = (e) => {
  const port = e.ports[0];
  port.onmessage = (m) => {
    if (m.data.op === "follow") follow(port, m.data.url);
    else if (m.data.op === "leave") leave(port, m.data.url);
  };
  port.start();
};
