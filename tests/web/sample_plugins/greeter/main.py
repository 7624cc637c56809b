"""A small plugin for the web console tests: settings, a log line per turn, a page and an endpoint."""

from core.plugin import BasePlugin, PageMenu, PluginPage, on, register
from core.prompt_manager import Prompt


class Greeter(BasePlugin):
    async def initialize(self):
        self.logger.info("greeter ready: greeting=%s times=%s", self.cfg["greeting"], self.cfg["times"])

    @on.llm_request()
    async def greet(self, event, req, tag_set, *_):
        self.logger.info("greeter adds its greeting for %s", event.sid)
        req.system_prompt.append(Prompt(self.cfg["greeting"] * self.cfg["times"], "greeting", "greeter"))

    @register.page("/dashboard", menu=PageMenu(label={"en": "Greeter", "zh": "问候"}, icon="Monitor"))
    def dashboard(self):
        return PluginPage.from_folder("./web")

    @register.page("/hello")
    def hello(self):
        return PluginPage.from_html("<h1>Hello from greeter</h1>")

    @register.api("GET", "/status")
    async def status(self, request):
        return {"greeting": self.cfg["greeting"], "times": self.cfg["times"]}

    @register.api("POST", "/echo/{word}")
    async def echo(self, word: str, body, times: int = 1):
        return {"word": word * times, "body": body}
