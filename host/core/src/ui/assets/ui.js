// metaclaw's dashboard works without this script: every page is rendered by
// the server, and destructive actions go through a confirm page of their own
// (confirm.html), so nothing here guards anything.
"use strict";
