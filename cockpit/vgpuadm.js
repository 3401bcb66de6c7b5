/* vgpuadm's Cockpit page. Every fact shown and every change made goes through the vgpuadm CLI
 * (cockpit.spawn(["vgpuadm", ..., "--json"], {superuser: "require"})): placement, capacity and ownership stay the
 * CLI's rules. Data from the host is only ever put into the page as text (textContent), never as markup. */
"use strict";

(function () {
    const $ = (id) => document.getElementById(id);
    let lastPreview = null; // the form values the shown plan was made for

    /* Cockpit's light and dark themes: the shell stores the choice in localStorage "shell:style" (auto, light,
     * dark) and tells open pages with a "cockpit-style" event; "auto" follows the browser's colour scheme. */
    const darkQuery = window.matchMedia("(prefers-color-scheme: dark)");
    function applyTheme(style) {
        if (style === undefined) {
            try {
                style = window.localStorage.getItem("shell:style") || "auto";
            } catch (e) {
                style = "auto";
            }
        }
        const dark = style === "dark" || (style !== "light" && darkQuery.matches);
        document.documentElement.classList.toggle("pf-v5-theme-dark", dark);
    }
    window.addEventListener("storage", (ev) => { if (ev.key === "shell:style") applyTheme(); });
    window.addEventListener("cockpit-style", (ev) => applyTheme(ev.detail && ev.detail.style));
    darkQuery.addEventListener("change", () => applyTheme());
    applyTheme();

    /* One vgpuadm run. Resolves with the parsed JSON; rejects with {message, hint, exit}: vgpuadm's JSON error
     * object (stdout under --json), else its `error: …` / `hint: …` lines on stderr, shown to the user as they are.
     * `report` commands (doctor) exit non-zero when a check fails and still print their document: resolve with it. */
    function vgpuadm(args, report) {
        return new Promise((resolve, reject) => {
            cockpit.spawn(["vgpuadm"].concat(args), { superuser: "require", err: "message" }).then(
                (out) => {
                    try {
                        resolve(JSON.parse(out));
                    } catch (e) {
                        reject({ message: "vgpuadm printed no JSON for: vgpuadm " + args.join(" "), hint: "", exit: 0 });
                    }
                },
                (ex, out) => {
                    let doc = null;
                    try {
                        doc = JSON.parse(out || "");
                    } catch (e) {
                        doc = null;
                    }
                    if (doc && typeof doc.error === "string") {
                        reject({ message: doc.error, hint: doc.hint || "", exit: doc.exit_code });
                    } else if (doc && report) {
                        resolve(doc);
                    } else {
                        reject(parseError(ex, args));
                    }
                });
        });
    }

    function parseError(ex, args) {
        const text = (ex && ex.message) || String(ex);
        let message = "";
        let hint = "";
        for (const line of text.split("\n")) {
            if (line.startsWith("error: ") && !message) message = line.slice(7);
            else if (line.startsWith("hint: ") && !hint) hint = line.slice(6);
        }
        if (!message) {
            message = ex && ex.problem === "not-found"
                ? "vgpuadm is not installed on this host"
                : text.trim() || "vgpuadm " + args[0] + " failed";
            if (ex && ex.problem === "not-found") hint = "install vgpuadm (see its README) so that it is on root's PATH";
        }
        return { message: message, hint: hint, exit: ex && ex.exit_status };
    }

    function el(tag, text, cls) {
        const node = document.createElement(tag);
        if (text !== undefined && text !== null) node.textContent = String(text);
        if (cls) node.className = cls;
        return node;
    }

    function row(cells, cls) {
        const tr = el("tr", null, cls);
        for (const c of cells) {
            const td = el("td");
            if (c instanceof Node) td.appendChild(c);
            else td.textContent = c === null || c === undefined || c === "" ? "–" : String(c);
            tr.appendChild(td);
        }
        return tr;
    }

    function showError(box, err) {
        box.replaceChildren();
        box.className = "alert alert-danger";
        box.appendChild(el("p", "error: " + err.message, "error-line"));
        if (err.hint) box.appendChild(el("p", "hint: " + err.hint, "hint-line"));
    }

    function showOk(box, lines) {
        box.replaceChildren();
        box.className = "alert alert-success";
        for (const line of lines) box.appendChild(el("p", line));
    }

    function model(gpu) {
        if (gpu.model) return gpu.model;
        if (gpu.vendor_id && gpu.device_id) return gpu.vendor_id.slice(2) + ":" + gpu.device_id.slice(2);
        return gpu.kind === "virtual" ? "virtual (" + gpu.address + ")" : null;
    }

    /* What the driver reports a device uses now (its `now` in `vgpuadm inventory --usage --json`, the join `show --vm`
     * uses), in show's words: "31 % GPU, 0.7 of 1 GiB"; "GPU n/a" where the driver has no utilization (MIG). */
    function nowText(now) {
        if (!now) return null;
        const gpu = now.gpu_percent === null ? "GPU n/a" : now.gpu_percent + " % GPU";
        if (now.fb_used_mib === null || now.fb_total_mib === null) return gpu;
        const gib = (mib) => String(Math.round(mib / 102.4) / 10);
        return gpu + ", " + gib(now.fb_used_mib) + " of " + gib(now.fb_total_mib) + " GiB";
    }

    /* ---- the summary and the table ---------------------------------------------------------------------- */

    function renderSummary(inv, doctor) {
        const s = inv.summary;
        const layouts = Array.from(new Set(inv.gpus.map((g) => g.layout))).sort().join(", ");
        const withRoom = inv.types.filter((t) => t.free > 0).length;
        const gib = (mib) => (mib / 1024).toFixed(mib % 1024 ? 1 : 0) + " GiB";
        const items = [
            ["GPUs", s.gpus], ["Layouts", layouts || "none"], ["Instances used", s.devices],
            ["Types with room", withRoom + " of " + inv.types.length],
            ["Framebuffer free", gib(s.framebuffer_free_mib) + " of " + gib(s.framebuffer_total_mib)],
            ["Owned by a VM", s.owned], ["Leaks (no VM owns them)", s.unowned], ["Recorded but missing", s.missing],
        ];
        const dl = $("summary");
        dl.replaceChildren();
        for (const [k, v] of items) {
            const div = el("div", null, "summary-item");
            div.appendChild(el("dt", k));
            div.appendChild(el("dd", v));
            div.dataset.key = k;
            dl.appendChild(div);
        }
        const ul = $("warnings");
        ul.replaceChildren();
        for (const w of inv.warnings || []) ul.appendChild(el("li", w, "warning"));
        for (const c of (doctor && doctor.checks) || []) {
            if (c.status !== "pass") ul.appendChild(el("li", c.status + ": " + c.detail + (c.hint ? " (" + c.hint + ")" : ""), c.status));
        }
        $("host").textContent = inv.host + (inv.simulated ? " (simulated)" : "");
    }

    function renderTable(inv, migInstances) {
        const body = $("device-table").tBodies[0];
        body.replaceChildren();
        const byParent = new Map(); // keys are host data: "__proto__" must be a key like any other
        for (const d of inv.devices) {
            if (!byParent.has(d.physical_gpu)) byParent.set(d.physical_gpu, []);
            byParent.get(d.physical_gpu).push(d);
        }
        for (const g of inv.gpus) {
            const state = g.layout === "passthrough" && g.driver === "vfio-pci" ? "bound to vfio-pci"
                : g.devices ? g.devices + " in use" : "free";
            body.appendChild(row([g.address, model(g), g.layout, g.running_types.join(", "), g.domains.join(", "), state,
                null], "gpu"));
            for (const f of inv.functions) {
                if (f.kind === "vf" && f.physical_gpu === g.address && f.devices.length === 0) {
                    body.appendChild(row(["  " + f.address, "VF", f.layout, null, null, "free", null], "vf"));
                }
            }
            for (const d of byParent.get(g.address) || []) {
                const owner = d.owned ? d.domain : d.domain === null ? "unassigned" : d.domain;
                const state = d.owned ? "owned" : "leak: no VM owns it";
                body.appendChild(row(["  " + d.id, d.name, d.kind === "mdev" ? "mdev" : "VF (vendor VFIO)", d.type_id,
                    owner, state, nowText(d.now)], d.owned ? "device" : "device leak"));
            }
            for (const m of migInstances.filter((i) => i.address === g.address)) {
                body.appendChild(row(["  GI " + m.instance_id, "MIG " + m.name, "MIG instance", m.name, m.owner,
                    m.owner ? "used" : "free", null], "mig"));
            }
        }
        for (const m of inv.missing || []) {
            body.appendChild(row([m.uuid || m.address, null, m.mode, m.type_id, m.domain, "missing (restore makes it)",
                null],
                "missing"));
        }
    }

    /* ---- the Allocate form and the VM list ------------------------------------------------------------ */

    function renderForm(inv, vms) {
        const vmSel = $("vm");
        const keepVm = vmSel.value;
        vmSel.replaceChildren();
        for (const vm of vms) vmSel.appendChild(new Option(vm.name + " (" + vm.state + ")", vm.name));
        if (keepVm) vmSel.value = keepVm;
        const typeSel = $("type");
        const keepType = typeSel.value;
        typeSel.replaceChildren();
        for (const t of inv.types) {
            const per = t.gpus.filter((g) => g.free > 0).map((g) => g.gpu + ": " + g.free).join(", ");
            const label = t.type_id + " · " + (t.name || t.type_id) + " · " + t.free + " free" + (per ? " (" + per + ")" : "");
            typeSel.appendChild(new Option(label, t.type_id));
        }
        if (keepType) typeSel.value = keepType;
        const gpuSel = $("gpu");
        const keepGpu = gpuSel.value;
        gpuSel.replaceChildren(new Option("any", ""));
        for (const g of inv.gpus) if (g.kind !== "virtual") gpuSel.appendChild(new Option(g.address + " " + (model(g) || ""), g.address));
        gpuSel.value = keepGpu;
    }

    function renderVms(vms) {
        const body = $("vm-table").tBodies[0];
        body.replaceChildren();
        for (const vm of vms) {
            const devs = vm.devices.map((d) => (d.type_id || d.mode) + " " + (d.uuid || d.address || "")).join(", ");
            let action = null;
            if (vm.devices.length) {
                action = el("button", "Release", "release");
                action.type = "button";
                action.dataset.vm = vm.name;
                action.addEventListener("click", () => release(vm.name));
            }
            const tr = row([vm.name, vm.state, devs, action || el("span")], "vm");
            tr.dataset.vm = vm.name;
            body.appendChild(tr);
        }
    }

    function formArgs() {
        const args = ["create", "--type", $("type").value, "--vm", $("vm").value, "--count", String($("count").value || 1),
            "--policy", $("policy").value];
        if ($("gpu").value) args.push("--gpu", $("gpu").value);
        return args;
    }

    function preview(ev) {
        ev.preventDefault();
        const args = formArgs();
        const box = $("result");
        box.replaceChildren();
        box.className = "";
        $("apply").disabled = true;
        $("plan").hidden = true;
        vgpuadm(args.concat(["--dry-run", "--json"])).then((res) => {
            $("plan-steps").replaceChildren(...res.steps.map((s) => el("li", s)));
            if (!res.steps.length) $("plan-steps").appendChild(el("li", "nothing to do: " + res.message));
            $("plan-xml").textContent = res.hostdevs.join("");
            $("plan").hidden = false;
            lastPreview = args.join("\u0000");
            $("apply").disabled = res.steps.length === 0;
        }, (err) => showError(box, err));
    }

    function apply() {
        const args = formArgs();
        if (args.join("\u0000") !== lastPreview) return; // the form changed since the preview: preview again
        const box = $("result");
        $("apply").disabled = true;
        vgpuadm(args.concat(["--json"])).then((res) => {
            showOk(box, [res.message + (res.changed ? ": done" : ": nothing to do")].concat(res.steps));
            $("plan").hidden = true;
            return refresh();
        }, (err) => showError(box, err));
    }

    function release(vm) {
        const box = $("result");
        vgpuadm(["destroy", "--vm", vm, "--all", "--json"]).then((res) => {
            showOk(box, [res.message + (res.changed ? ": done" : ": nothing to do")].concat(res.steps));
            return refresh();
        }, (err) => showError(box, err));
    }

    function reconcile() {
        const box = $("result");
        vgpuadm(["reconcile", "--json"]).then((res) => {
            const lines = [].concat(res.recovered || [], res.fixed || [], res.lost || [],
                (res.leaks || []).map((l) => "leak: " + l));
            showOk(box, lines.length ? lines : ["nothing to reconcile"]);
            return refresh();
        }, (err) => showError(box, err));
    }

    /* ---- loading ------------------------------------------------------------------------------------- */

    function optional(args) {
        // Reports the page can do without (doctor, mig on a host without MIG): their failure is not the page's.
        return vgpuadm(args, true).catch(() => null);
    }

    function refresh() {
        const loadError = $("load-error");
        return Promise.all([vgpuadm(["inventory", "--usage", "--json"]), vgpuadm(["vms", "--json"]), optional(["doctor", "--json"]),
            optional(["mig", "instances", "--json"])])
            .then(([inv, vms, doctor, mig]) => {
                loadError.hidden = true;
                renderSummary(inv, doctor);
                renderTable(inv, Array.isArray(mig) ? mig : (mig && mig.instances) || []);
                renderForm(inv, vms);
                renderVms(vms);
                const pending = (inv.warnings || []).some((w) => w.includes("journal")) ||
                    Boolean(doctor && (doctor.checks || []).some((c) => c.check === "journal" && c.status !== "pass"));
                $("journal").hidden = !pending;
                document.body.dataset.loaded = "yes";
            }, (err) => {
                showError(loadError, err);
                loadError.hidden = false;
                const pending = err.message.includes("interrupted change is pending");
                $("journal").hidden = !pending;
                document.body.dataset.loaded = "error";
            });
    }

    $("allocate").addEventListener("submit", preview);
    $("allocate").addEventListener("input", () => { $("apply").disabled = true; });
    $("apply").addEventListener("click", apply);
    $("refresh").addEventListener("click", () => refresh());
    $("reconcile").addEventListener("click", reconcile);
    cockpit.transport.wait(() => refresh());
}());
