// With a server command that does not exist: the extension shows one clear error and "infill: offline".
'use strict';
const path = require('node:path');
const { openWorkbench } = require('./workbench.cjs');

async function main() {
  const { browser, page } = await openWorkbench(process.env.URL);
  try {
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
