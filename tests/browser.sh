#!/usr/bin/env bash
# The report test renders report.html in a real browser: Debian's chromium. Install it when it is
# missing and we may (root with apt-get); otherwise say in one line that the test will skip. Never fails.
if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "tests/browser.sh: installing Debian's chromium with apt-get (the report test renders report.html in it)"
    if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) \
            >/tmp/distprof-browser-install.log 2>&1; then
        exit 0
    fi
    echo "tests/browser.sh: apt-get could not install chromium (log: /tmp/distprof-browser-install.log); the browser test will skip"
    exit 0
fi
echo "tests/browser.sh: chromium is missing and this is not root with apt-get; the browser test will skip"
exit 0
