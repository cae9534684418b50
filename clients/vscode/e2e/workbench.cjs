// Opens code-server's workbench in headless Chromium (the system package), retrying while code-server starts.
'use strict';
const { chromium } = require(process.env.PLAYWRIGHT_CORE);

async function openWorkbench(url) {
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-dev-shm-usage'],
  });
  const page = await browser.newPage({ viewport: { width: 1200, height: 700 } });
  try {
    for (let i = 0; i < 60; i++) {
      try { await page.goto(url, { waitUntil: 'domcontentloaded', timeout: 10000 }); break; } catch (e) {
        if (i === 59) throw e;
        await page.waitForTimeout(1000);
      }
    }
    await page.waitForSelector('.monaco-workbench', { timeout: 120000 });
  } catch (err) {
    await browser.close();
    throw err;
  }
  return { browser, page };
}

module.exports = { openWorkbench };
