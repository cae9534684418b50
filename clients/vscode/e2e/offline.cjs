// With a server command that does not exist: the extension shows one clear error and "infill: offline".
'use strict';
const path = require('node:path');
const { chromium } = require(process.env.PLAYWRIGHT_CORE);

async function main() {
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-dev-shm-usage'],
  });
  const page = await browser.newPage({ viewport: { width: 1200, height: 700 } });
  try {
    for (let i = 0; i < 60; i++) {
      try { await page.goto(process.env.URL, { waitUntil: 'domcontentloaded', timeout: 10000 }); break; } catch (e) {
        if (i === 59) throw e;
        await page.waitForTimeout(1000);
      }
    }
    await page.waitForSelector('.monaco-workbench', { timeout: 120000 });
    await page.waitForFunction(() => document.querySelector('.statusbar')?.textContent?.includes('infill: offline'),
      undefined, { timeout: 60000, polling: 500 });
    const toasts = page.locator('.notification-toast', { hasText: 'could not start the server' });
    await toasts.first().waitFor({ timeout: 30000 });
    await page.waitForTimeout(2000);
    const count = await toasts.count();
    await page.screenshot({ path: path.join(process.env.SHOTS, 'vscode-offline.png') });
    const all = await page.locator('.notification-toast').count();
    if (count !== 1 || all !== 1) throw new Error(`expected one error message, saw ${count} of ours and ${all} in all`);
    console.log('[offline] PASS: "infill: offline" in the status bar and one error message');
  } finally {
    await browser.close();
  }
}

main().catch((err) => { console.error(err); process.exit(1); });
