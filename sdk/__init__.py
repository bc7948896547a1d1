"""The JavaScript client SDK (``wds.js``, ``wds.d.ts``, the example page).

A Python package only so the files ship as package data with the service and the API can
serve them at ``{base_url}/sdk/`` (``api/doors/rest/sdk.py``); there is no Python code here.
"""
