document.body.append("script loaded");
