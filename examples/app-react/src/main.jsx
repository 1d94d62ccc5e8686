// The page: the probe initialised in one line, before React renders (so it wraps fetch before
// useChat's first request), then the chat.
import { createRoot } from "react-dom/client";
import { init } from "tokentap-probe";
import { Chat } from "./Chat.jsx";

const tokentap = document.querySelector('meta[name="tokentap-url"]').content;

const probeReady = init({ endpoint: `${tokentap}/_tokentap/v1/probe`, clockUrl: `${tokentap}/_tokentap/v1/clock`, trackFetch: (url) => new URL(url).pathname === "/api/chat" });

// window.sendMessage(text), for tests and the console: resolves with what the page showed, once
// the chat has mounted.
let chatMounted;
const send = new Promise((resolve) => { chatMounted = resolve; });
window.sendMessage = async (text) => (await send)(text);

createRoot(document.getElementById("root")).render(<Chat probeReady={probeReady} onSend={chatMounted} />);
