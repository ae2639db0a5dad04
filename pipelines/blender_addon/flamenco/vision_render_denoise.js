// Flamenco job type "Render and denoise (vision)": render an animation as OpenEXR MultiLayer frames, then
// denoise them with `vision denoise --temporal` in shards that start warm.
//
// Install: copy this file into the `scripts` folder beside the flamenco-manager executable and restart the
// Manager. Render the scene set up for denoising (the Vision Denoise add-on's "Set up for denoising": Denoising
// Data and Vector passes, OpenEXR MultiLayer); `vision` must be installed on the workers that take "misc" tasks.
//
// Task graph: one "blender" task per chunk of frames; one "misc" task per denoise shard I of N, running
//   vision denoise '<frames>*.exr' -o <denoised> --temporal -q --shard I/N --warmup K
// and depending on every render task that renders a frame of its shard or of the K frames before it (the
// frames it reads into the history first), so shards start as soon as their frames exist.

const JOB_TYPE = {
    label: "Render and denoise (vision)",
    description: "Render an animation, then denoise it without flicker with vision denoise --temporal",
    settings: [
        { key: "frames", type: "string", required: true,
          eval: "f'{C.scene.frame_start}-{C.scene.frame_end}'",
          description: "Frames to render, e.g. '1-240' or '1-10, 20-30'" },
        { key: "chunk_size", type: "int32", default: 10, visible: "submission",
          description: "Frames rendered by one Blender task" },
        { key: "render_output_path", type: "string", subtype: "file_path", required: true,
          eval: "C.scene.render.filepath",
          description: "Where Blender writes the frames: an absolute path with #### for the frame number" },
        { key: "denoised_path", type: "string", subtype: "dir_path", required: true,
          description: "Folder for the denoised frames (absolute)" },
        { key: "denoise_shards", type: "int32", default: 4, visible: "submission",
          description: "Denoise tasks the sequence is split into (--shard I/N)" },
        { key: "warmup", type: "int32", default: 8, visible: "submission",
          description: "Frames before a shard read into its history first (--warmup)" },
        { key: "vision", type: "string", default: "vision", visible: "submission",
          description: "The vision command on the workers" },
        { key: "blendfile", type: "string", required: true, visible: "web",
          description: "Path of the blend file to render" },
    ],
};

// "1-3, 7, 9-10" -> [1, 2, 3, 7, 9, 10], sorted, each frame once
function parseFrames(text) {
    const frames = new Set();
    for (const part of String(text).split(",")) {
        const item = part.trim();
        if (!item) continue;
        const m = item.match(/^(-?\d+)\s*(?:-|\.\.)\s*(-?\d+)$/);
        if (m) {
            const a = parseInt(m[1], 10), b = parseInt(m[2], 10);
            if (b < a) throw `frames: ${item} ends before it starts`;
            for (let f = a; f <= b; f++) frames.add(f);
        } else if (/^-?\d+$/.test(item)) {
            frames.add(parseInt(item, 10));
        } else {
            throw `frames: ${item} is not a frame or a range`;
        }
    }
    return Array.from(frames).sort((x, y) => x - y);
}

// consecutive frames, at most `size` per chunk: [[1..10], [11..20], ...]
function chunkFrames(frames, size) {
    const chunks = [];
    let current = [];
    for (const f of frames) {
        const last = current[current.length - 1];
        if (current.length && (current.length >= size || f !== last + 1)) {
            chunks.push(current);
            current = [];
        }
        current.push(f);
    }
    if (current.length) chunks.push(current);
    return chunks;
}

// the files Blender writes for a path with #### (or none: the number is appended), as a glob for vision
function framesGlob(outputPath) {
    const hashes = /#+/g;
    let glob = hashes.test(outputPath) ? outputPath.replace(/#+/g, "*") : outputPath + "*";
    if (!/\.exr$/i.test(glob)) glob += ".exr";
    return glob;
}

// the I-th of N contiguous blocks, as vision denoise --shard I/N takes it
function shardRange(count, index, shards) {
    return [Math.floor(index * count / shards), Math.floor((index + 1) * count / shards)];
}

function compileJob(job) {
    const settings = job.settings;
    const frames = parseFrames(settings.frames);
    if (!frames.length) throw "frames: no frames to render";
    const chunkSize = Math.max(1, settings.chunk_size || 1);
    const shards = Math.max(1, Math.min(settings.denoise_shards || 1, frames.length));
    const warmup = Math.max(0, settings.warmup === undefined ? 8 : settings.warmup);
    if (String(settings.render_output_path).startsWith("//"))
        throw "render_output_path: give an absolute path (vision denoise does not know the blend file's folder)";

    const renderOf = {};  // frame -> the task that renders it
    for (const chunk of chunkFrames(frames, chunkSize)) {
        const first = chunk[0], last = chunk[chunk.length - 1];
        const task = author.Task(`render-${first}-${last}`, "blender");
        task.addCommand(author.Command("blender-render", {
            exe: "{blender}",
            exeArgs: "{blenderArgs}",
            argsBefore: [],
            blendfile: settings.blendfile,
            args: ["--render-output", settings.render_output_path, "--render-format", "OPEN_EXR_MULTILAYER",
                   "--render-frame", first === last ? `${first}` : `${first}..${last}`],
        }));
        job.addTask(task);
        for (const f of chunk) renderOf[f] = task;
    }

    for (let i = 0; i < shards; i++) {
        const [start, end] = shardRange(frames.length, i, shards);
        const needed = frames.slice(Math.max(0, start - warmup), end);
        const task = author.Task(`denoise-${i + 1}-of-${shards}`, "misc");
        task.addCommand(author.Command("exec", {
            exe: settings.vision,
            args: ["denoise", framesGlob(settings.render_output_path), "-o", settings.denoised_path, "--temporal",
                   "-q", "--shard", `${i}/${shards}`, "--warmup", `${warmup}`],
        }));
        const deps = new Set(needed.map((f) => renderOf[f]));
        for (const dep of deps) task.addDependency(dep);
        job.addTask(task);
    }
}
