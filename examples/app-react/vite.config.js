// Vite builds the page into dist/ (the Express example serves it with APP_PAGE=react). The probe's
// wasm is an asset of the tokentap-probe package: Vite sees `new URL("./tokentap_probe_bg.wasm",
// import.meta.url)` in its module and emits the file next to the bundle.
import { defineConfig } from "vite";

export default defineConfig({
  // JSX without a plugin: React's automatic runtime.
  oxc: { jsx: { runtime: "automatic" } },
  build: { outDir: "dist", emptyOutDir: true },
  // In `vite dev`, pre-bundling would move probe.js away from its wasm: serve it as it is.
  optimizeDeps: { exclude: ["tokentap-probe"] },
});
