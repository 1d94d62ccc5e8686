// A chat with the AI SDK's useChat against the Express example's /api/chat (the UI message
// stream). The probe watches the answer's element for paints; useChat's fetch is the probe's.
import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport } from "ai";
import { useEffect, useRef, useState } from "react";
import { mark, observe } from "tokentap-probe";

// The HTTP status of the last answer, for the page's own report of what it saw.
let lastStatus = null;
const transport = new DefaultChatTransport({
  api: "/api/chat",
  // window.fetch at call time: the probe's wrapper.
  fetch: async (input, init) => {
    const response = await window.fetch(input, init);
    lastStatus = response.status;
    return response;
  },
});

const nextFrame = () => new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve)));

export function Chat({ probeReady, onSend }) {
  const { messages, sendMessage, status, error } = useChat({ transport });
  const [prompt, setPrompt] = useState("Tell me about streaming.");
  const answer = useRef(null);
  useEffect(() => observe(answer.current), []);

  // The answer on screen: the text parts of the last assistant message.
  const last = messages.filter((m) => m.role === "assistant").at(-1);
  const text = last ? last.parts.filter((p) => p.type === "text").map((p) => p.text).join("") : "";

  // window.sendMessage's sender: one message; resolves with what the page showed.
  useEffect(() => {
    onSend(async (message) => {
      await probeReady;
      mark("user_send");
      await sendMessage({ text: message });
      await nextFrame();
      return { status: lastStatus, chars: [...answer.current.textContent].length, content_encoding: null };
    });
  }, [onSend, sendMessage, probeReady]);

  return (
    <>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          mark("user_send");
          sendMessage({ text: prompt });
        }}
      >
        <input value={prompt} size={40} onChange={(e) => setPrompt(e.target.value)} /> <button>Send</button>{" "}
        <span>{status}</span>
      </form>
      {error ? <p role="alert">{String(error.message ?? error)}</p> : null}
      <p id="answer" ref={answer}>
        {text}
      </p>
    </>
  );
}
