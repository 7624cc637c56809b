"""A plugin in KiraAI's style with web pages and endpoints; it loads when no web console runs."""

from core.plugin import BasePlugin, PageMenu, PluginPage, register


class WebProbe(BasePlugin):
    async def initialize(self):
        self.hits = 0

    async def terminate(self):
        pass

    @register.page(
        "/dashboard", menu=PageMenu(label={"zh": "仪表盘", "en": "Dashboard"}, icon="DataAnalysis", order=10)
    )
    def dashboard(self):
        return PluginPage.from_folder("./web")

    @register.page("/info", auth=False, menu={"label": "Info", "icon": "Document"})
    def info(self):
        return PluginPage.from_html("<h1>Info</h1>")

    @register.api(method="GET", path="/status", auth=True, summary="Status")
    async def status(self):
        self.hits += 1
        return {"status": "running", "hits": self.hits}
