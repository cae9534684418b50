// Drives code-server in headless Chromium: open notes.txt, type, wait for the inline suggestion from infill-ls,
// accept it with Tab, save, and check the file on disk is the typed text plus exactly the suggested text.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { openWorkbench } = require('./workbench.cjs');

const URL = process.env.URL;
const FILE = process.env.FILE;
const SHOTS = process.env.SHOTS;
const LOG = process.env.COMPLETION_LOG;
const TYPED = ' and';

function log(msg) {
  console.log(`[drive ${new Date().toISOString().slice(11, 19)}] ${msg}`);
}

async function ghostText(page) {
  // VS Code draws the first line of a suggestion as .ghost-text-decoration, further lines in .ghost-text blocks.
  return page.evaluate(() => {
    const first = [...document.querySelectorAll('.ghost-text-decoration')].map((e) => e.textContent).join('');
    const more = [...document.querySelectorAll('.ghost-text .view-line')].map((e) => e.textContent);
    return [first, ...more].join('\n');
  });
}

// Select " weather" on line 3, run "Infill: Fill Gap" from the command palette, save, and check that exactly the
// selection was replaced.
async function fillGap(page, editorLines, line3) {
  await page.keyboard.press('Escape');
  await page.click(editorLines);
  await page.keyboard.press('Control+Home');
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('Home');
  await page.keyboard.press('Control+ArrowRight');
  await page.keyboard.press('Control+Shift+ArrowRight');
  await page.keyboard.press('F1');
  await page.waitForSelector('.quick-input-widget input', { timeout: 30000 });
  await page.keyboard.type('Infill: Fill Gap (replace selection)');
  await page.waitForSelector('.quick-input-list .monaco-list-row', { timeout: 30000 });
  await page.waitForTimeout(500);
  log(`palette: ${await page.locator('.quick-input-list .monaco-list-row').first().textContent()}`);
  await page.keyboard.press('Enter');
  const before = '# Notes\n\n' + line3 + '\n';
  let saved = before;
  for (let i = 0; i < 120 && saved === before; i++) {
    await page.waitForTimeout(500);
    await page.keyboard.press('Control+S');
    saved = fs.readFileSync(FILE, 'utf8');
  }
  log(`after Fill Gap: ${JSON.stringify(saved)}`);
  await page.screenshot({ path: path.join(SHOTS, 'vscode-fill-gap.png') });
  const line = saved.split('\n')[2];
  const suffix = line3.slice('The weather'.length);
  if (!(line.startsWith('The') && line.endsWith(suffix) && line.slice(3, line.length - suffix.length) !== ' weather')) {
    throw new Error(`Fill Gap did not replace exactly the selection: ${JSON.stringify(saved)}`);
  }
  log('PASS: Fill Gap replaced exactly the selection');
}

async function main() {
  const { browser, page } = await openWorkbench(URL);
  try {
    log('workbench loaded');
    await page.waitForSelector('.statusbar', { timeout: 60000 });
    await page.locator('.explorer-folders-view .monaco-list-row', { hasText: 'notes.txt' }).first()
      .click({ timeout: 60000 });
    const editorLines = '.editor-group-container .monaco-editor .view-lines';
    await page.waitForSelector(`${editorLines} >> text=The weather today is`, { timeout: 60000 });
    log('editor open; waiting for the server to be ready');
    await page.waitForFunction(() => document.querySelector('.statusbar')?.textContent?.includes('infill: ready'),
      undefined, { timeout: 180000, polling: 500 });
    log('status bar: infill: ready');
    await page.click(editorLines);
    await page.keyboard.press('Control+End');
    await page.keyboard.press('ArrowUp');
    await page.keyboard.press('End');
    let ghost = '';
    for (let attempt = 0; attempt < 4 && !ghost; attempt++) {
      await page.keyboard.type(attempt === 0 ? TYPED : '');
      if (attempt > 0) await page.keyboard.press('Alt+Backslash'); // trigger inline suggestion explicitly
      try {
        await page.waitForSelector('.ghost-text-decoration, .ghost-text', { timeout: 45000 });
        ghost = (await ghostText(page)).replace(/\u00a0/g, ' ');
      } catch { log(`no suggestion yet (attempt ${attempt + 1})`); }
    }
    if (!ghost) throw new Error('no inline suggestion appeared');
    log(`suggestion shown: ${JSON.stringify(ghost)}`);
    await page.screenshot({ path: path.join(SHOTS, 'vscode-inline-suggestion.png') });
    await page.keyboard.press('Tab');
    await page.waitForTimeout(500);
    await page.keyboard.press('Control+S');
    await page.waitForTimeout(1500);
    const saved = fs.readFileSync(FILE, 'utf8');
    const expected = '# Notes\n\nThe weather today is' + TYPED + ghost + '\n';
    log(`saved: ${JSON.stringify(saved)}`);
    await page.screenshot({ path: path.join(SHOTS, 'vscode-accepted.png') });
    if (saved !== expected) {
      throw new Error(`accepted text mismatch: expected ${JSON.stringify(expected)} got ${JSON.stringify(saved)}`);
    }
    log('PASS: Tab inserted exactly the suggestion');
    // The accept ran InlineCompletionItem.command -> infill/telemetry; the server logs it (completionLog setting).
    let events = [];
    for (let i = 0; i < 50 && !events.some((e) => e.event === 'accepted'); i++) {
      await page.waitForTimeout(200);
      events = fs.existsSync(LOG) ? fs.readFileSync(LOG, 'utf8').split('\n').filter((l) => l.trim())
        .map((l) => JSON.parse(l)).filter((r) => r.type === 'telemetry') : [];
    }
    const accepted = events.find((e) => e.event === 'accepted');
    if (!accepted || accepted.acceptedChars !== [...ghost].length || accepted.partial !== false) {
      throw new Error(`no matching accepted telemetry in ${LOG}: ${JSON.stringify(events)}`);
    }
    log(`PASS: server received telemetry ${JSON.stringify(accepted)}`);
    await fillGap(page, editorLines, 'The weather today is' + TYPED + ghost);
  } catch (err) {
    const shot = path.join(path.dirname(FILE), '..', 'e2e-failure.png'); // beside the run's logs, not in docs
    await page.screenshot({ path: shot }).catch(() => undefined);
    console.error(`failure screenshot: ${shot}`);
    throw err;
  } finally {
    await browser.close();
  }
}

main().catch((err) => { console.error(err); process.exit(1); });
