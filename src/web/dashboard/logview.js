// Gantry's dashboard, a step's log: a window of at most WINDOW bytes of
// the step's text is drawn, however long the log. The page opens at the
// log's tail (read with a byte range of GET /api/v1/builds/{id}/log, up
// to the event the page's event stream starts its log lines after),
// follows new lines live while the window is at the end, and reads the
// part the reader scrolls or jumps to (the start, the end) a range at a
// time, dropping what leaves the window. A 200 MB log costs the tab what
// a 1 MB one does. Uses app.js's helpers ($, esc, clock, bytes, authHeaders)
// and its ANSI drawing (ansiSpans).
"use strict";

// The most bytes of a log drawn at once, and read per range.
const LOG_WINDOW = 1 << 20;
const LOG_READ = 256 << 10;
const utf8 = new TextEncoder();

class LogView {
  // The log of step `step` of build `build`, drawn in `pre`, with its bar
  // of position and jumps in `bar`. `upto`: the last event whose log line
  // the page's stream left out (its ranges read up to it); `stored`:
  // whether the step printed before it (its tail is read first).
  constructor(build, step, pre, bar, upto, stored) {
    Object.assign(this, { build, step, pre, bar, upto });
    this.start = 0; // offset of the first byte drawn
    this.end = 0; // offset after the last byte drawn
    this.total = 0; // bytes of the log known
    this.busy = false;
    this.live = { fg: null, bold: false, pending: "" }; // colours of the followed end
    this.waiting = stored ? [] : null; // live chunks until the tail is read
    this.drawBar();
    pre.addEventListener("scroll", () => this.scrolled());
    if (stored) this.openTail();
  }

  // Reads `range` (a Range header) of the log as bytes; answers
  // { start, body, total } (an empty log: no body; a closed range the node
  // stopped reading at its end: total Infinity, the length unknown).
  async read(range) {
    const q = new URLSearchParams({ step: this.step, upto: String(this.upto) });
    const r = await fetch(`/api/v1/builds/${this.build}/log?${q}`, { headers: { ...authHeaders, Range: range } });
    const span = /bytes (?:(\d+)-\d+|\*)\/(\d+|\*)/.exec(r.headers.get("content-range") || "");
    const total = span && span[2] !== "*" ? Number(span[2]) : Infinity;
    if (r.status === 416 && span) return { start: total, body: new Uint8Array(), total };
    if (r.status !== 206 || !span) throw new Error(`the log's range: HTTP ${r.status}`);
    return { start: Number(span[1]), body: new Uint8Array(await r.arrayBuffer()), total };
  }

  // A chunk of text as a span of its byte length, colours drawn (from a
  // fresh colour state unless `state` is given).
  chunk(text, n, state, title) {
    const span = document.createElement("span");
    span.dataset.bytes = n;
    if (title) span.title = title;
    span.appendChild(ansiSpans(text, state || { fg: null, bold: false, pending: "" }));
    return span;
  }

  // Whole lines of `got`: a cut line at its start is left out unless it
  // starts the log (`keepHead`), one at its end unless it ends the log.
  static lines(got, keepHead) {
    let from = 0;
    let to = got.body.length;
    if (!keepHead && got.start > 0) {
      const nl = got.body.indexOf(10);
      if (nl >= 0 && nl + 1 < to) from = nl + 1;
    }
    if (got.start + to < got.total) {
      const nl = got.body.lastIndexOf(10);
      if (nl >= from) to = nl + 1;
    }
    return { start: got.start + from, end: got.start + to, text: new TextDecoder().decode(got.body.subarray(from, to)) };
  }

  // Draws `part` as the whole window.
  replace(part) {
    this.pre.replaceChildren();
    this.start = part.start;
    this.end = part.start;
    this.append(part);
  }

  append(part) {
    if (part.end > part.start) this.pre.appendChild(this.chunk(part.text, part.end - part.start));
    this.end = part.end;
    this.live = { fg: null, bold: false, pending: "" };
    this.trimFront();
  }

  prepend(part) {
    if (part.end > part.start) {
      const before = this.pre.scrollHeight;
      this.pre.insertBefore(this.chunk(part.text, part.end - part.start), this.pre.firstChild);
      this.pre.scrollTop += this.pre.scrollHeight - before;
    }
    this.start = part.start;
    this.trimBack();
  }

  // Drops chunks at the front (or back) past the window.
  trimFront() {
    while (this.end - this.start > LOG_WINDOW && this.pre.childElementCount > 1) {
      const first = this.pre.firstElementChild;
      const before = this.pre.scrollHeight;
      this.start += Number(first.dataset.bytes);
      first.remove();
      this.pre.scrollTop -= before - this.pre.scrollHeight;
    }
  }

  trimBack() {
    while (this.end - this.start > LOG_WINDOW && this.pre.childElementCount > 1) {
      const last = this.pre.lastElementChild;
      this.end -= Number(last.dataset.bytes);
      last.remove();
    }
  }

  // A length a read told, if it told one.
  learn(total) {
    if (Number.isFinite(total)) this.total = Math.max(this.total, total);
  }

  atEnd() {
    return this.end >= this.total;
  }

  // One read at a time; the bar says where the window is after it.
  async run(work) {
    if (this.busy) return;
    this.busy = true;
    try {
      await work();
    } catch (err) {
      this.bar.querySelector(".log-where").textContent = err.message;
      this.busy = false;
      return;
    }
    this.busy = false;
    this.drawBar();
  }

  openTail() {
    return this.run(async () => {
      const got = await this.read(`bytes=-${LOG_READ}`);
      this.total = got.total;
      this.replace(LogView.lines(got, false));
      const waited = this.waiting || [];
      this.waiting = null;
      for (const [e, seq] of waited) this.follow(e, seq);
      this.pre.hidden = this.total === 0;
      this.pre.scrollTop = this.pre.scrollHeight;
    });
  }

  // To the log's start (`where` "start") or its end ("end").
  jump(where) {
    return this.run(async () => {
      const got = await this.read(where === "start" ? `bytes=0-${LOG_READ - 1}` : `bytes=-${LOG_READ}`);
      this.learn(got.total);
      this.replace(LogView.lines(got, where === "start"));
      this.pre.scrollTop = where === "start" ? 0 : this.pre.scrollHeight;
    });
  }

  earlier() {
    if (this.start <= 0) return null;
    return this.run(async () => {
      const from = Math.max(0, this.start - LOG_READ);
      const got = await this.read(`bytes=${from}-${this.start - 1}`);
      this.prepend(LogView.lines({ ...got, total: this.start }, from === 0));
    });
  }

  later() {
    if (this.atEnd()) return null;
    return this.run(async () => {
      const got = await this.read(`bytes=${this.end}-${this.end + LOG_READ - 1}`);
      this.learn(got.total);
      this.append(LogView.lines(got, true));
    });
  }

  scrolled() {
    const p = this.pre;
    if (p.scrollTop < 40) this.earlier();
    else if (p.scrollHeight - p.scrollTop - p.clientHeight < 40) this.later();
  }

  // A live log event of seq `seq` (after the page's stream began): drawn
  // when the window is at the end, else only counted; ranges read from
  // now on read up to it.
  follow(e, seq) {
    if (this.waiting) {
      this.waiting.push([e, seq]);
      return;
    }
    this.upto = Math.max(this.upto, seq);
    const n = utf8.encode(e.data).length;
    if (this.atEnd() && !this.busy) {
      const p = this.pre;
      const atBottom = p.scrollHeight - p.scrollTop - p.clientHeight < 8;
      const span = this.chunk(e.data, n, this.live, clock(e.time));
      if (e.stream !== "stdout") span.className = e.stream;
      p.appendChild(span);
      this.end += n;
      this.total += n;
      this.trimFront();
      p.hidden = false;
      if (atBottom) p.scrollTop = p.scrollHeight;
    } else {
      this.total += n;
    }
    this.drawBar();
  }

  drawBar() {
    const whole = this.start === 0 && this.atEnd();
    this.bar.hidden = this.total === 0 || (whole && this.total <= LOG_WINDOW);
    if (this.bar.hidden) return;
    if (!this.bar.firstChild) {
      const name = esc(this.step);
      this.bar.innerHTML = `<span class="log-where muted"></span>
        <button type="button" data-log-jump="start" aria-label="the start of the log of step ${name}">start</button>
        <button type="button" data-log-jump="end" aria-label="the end of the log of step ${name}">end</button>`;
      for (const b of this.bar.querySelectorAll("button")) b.onclick = () => this.jump(b.dataset.logJump);
    }
    this.bar.querySelector(".log-where").textContent =
      `showing ${bytes(this.start)} to ${bytes(this.end)} of ${bytes(this.total)}`;
  }
}
