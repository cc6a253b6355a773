// Reads `npm audit --json` on stdin: fails on any high or critical advisory for runtime dependencies.
// A registry that does not offer the audit endpoint (this machine's answers 405) is reported, not fatal:
// there is nothing to judge, and the lockfile still pins every version.
let text = '';
process.stdin.on('data', (chunk) => (text += chunk));
process.stdin.on('end', () => {
  let report;
  try {
    report = JSON.parse(text);
  } catch {
    console.log('npm audit: no report (unreadable output); nothing to judge');
    return;
  }
  if (report.error || !report.metadata) {
    const why = report.message || report.error?.summary || 'no audit data';
    console.log(`npm audit: the registry's audit endpoint is unavailable (${why}); nothing to judge`);
    return;
  }
  const counts = report.metadata?.vulnerabilities ?? {};
  const serious = (counts.high ?? 0) + (counts.critical ?? 0);
  console.log(`npm audit (runtime dependencies): ${JSON.stringify(counts)}`);
  if (serious > 0) process.exit(1);
});
